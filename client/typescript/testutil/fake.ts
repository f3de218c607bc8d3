// A Journal stand-in for execute's unit tests: it answers register with a
// scripted answer and records every call, so that the tests can drive
// execute through answers and refusals no real journal gives on demand.
// (Kept outside test/ so that `node --test dist/test/` does not take it for
// a test file.)

import { create } from "@bufbuild/protobuf";

import { OperationSchema, Status as PbStatus } from "../src/gen/opjournal/v1/journal_pb.js";
import { operationOf, type CallOptions, type ExtendLeaseResult, type Journal, type MarkParams, type MarkSucceededParams,
  type Operation, type RegisterParams, type RegisterResult } from "../src/journal.js";

/** An Operation record with the given status and fields. */
export function fakeOperation(key: string, status: PbStatus, fields: { attemptCount?: number; externalId?: string; errorCode?: string } = {}): Operation {
  return operationOf(create(OperationSchema, { operationKey: key, actionType: "create_payment", status, ...fields }));
}

/** One call the fake received: its method, when (performance.now()), and its arguments. */
export interface FakeCall {
  method: string;
  at: number;
  args: unknown[];
}

/**
 * A scripted journal. register returns onRegister(params); extendLease,
 * markUnknown and lookup call their hooks when set, else answer as a
 * journal would for the holder of the lease.
 */
export class FakeJournal {
  readonly workerId = "fake-worker";
  readonly leaseSeconds = 0;
  readonly calls: FakeCall[] = [];
  onRegister: (params: RegisterParams) => Promise<RegisterResult> | RegisterResult;
  onExtendLease: ((n: number, key: string, attempt: number, options?: CallOptions) => Promise<ExtendLeaseResult>) | undefined;
  onMarkUnknown: ((p: MarkParams) => Promise<Operation>) | undefined;
  onLookup: ((key: string) => Promise<Operation>) | undefined;

  constructor(onRegister: (params: RegisterParams) => Promise<RegisterResult> | RegisterResult) {
    this.onRegister = onRegister;
  }

  /** This fake, typed as the Journal execute takes. */
  get journal(): Journal {
    return this as unknown as Journal;
  }

  /** The calls of one method. */
  callsOf(method: string): FakeCall[] {
    return this.calls.filter((c) => c.method === method);
  }

  private note(method: string, ...args: unknown[]): void {
    this.calls.push({ method, at: performance.now(), args });
  }

  async register(params: RegisterParams, _options?: CallOptions): Promise<RegisterResult> {
    this.note("register", params);
    return this.onRegister(params);
  }

  async extendLease(key: string, attempt: number, leaseSeconds = 0, options?: CallOptions): Promise<ExtendLeaseResult> {
    this.note("extendLease", key, attempt, leaseSeconds);
    const n = this.callsOf("extendLease").length;
    if (this.onExtendLease) return this.onExtendLease(n, key, attempt, options);
    return { operation: fakeOperation(key, PbStatus.IN_PROGRESS, { attemptCount: attempt }), leaseSeconds: 1, leaseUntil: null };
  }

  async markSucceeded(p: MarkSucceededParams, _options?: CallOptions): Promise<Operation> {
    this.note("markSucceeded", p);
    return fakeOperation(p.key, PbStatus.SUCCEEDED, { attemptCount: p.attempt, externalId: p.externalId });
  }

  async markUnknown(p: MarkParams, _options?: CallOptions): Promise<Operation> {
    this.note("markUnknown", p);
    if (this.onMarkUnknown) return this.onMarkUnknown(p);
    return fakeOperation(p.key, PbStatus.UNKNOWN, { attemptCount: p.attempt, errorCode: p.errorCode });
  }

  async markFailedFinal(p: MarkParams, _options?: CallOptions): Promise<Operation> {
    this.note("markFailedFinal", p);
    return fakeOperation(p.key, PbStatus.FAILED_FINAL, { attemptCount: p.attempt, errorCode: p.errorCode });
  }

  async lookup(key: string, _options?: CallOptions): Promise<Operation> {
    this.note("lookup", key);
    if (this.onLookup) return this.onLookup(key);
    return fakeOperation(key, PbStatus.UNKNOWN, { attemptCount: 1 });
  }
}
