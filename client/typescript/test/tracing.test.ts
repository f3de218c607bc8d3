// Trace context on the wire: the Journal sends the caller's W3C trace
// context (traceparent, tracestate, baggage) with every call, from the
// active OpenTelemetry context (a real BasicTracerProvider here) or from
// the traceContext hook, and nothing else. The peer is a real node:http2
// server that records each gRPC request's headers and answers
// UNAVAILABLE (a trailers-only gRPC answer).

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Http2Server, type IncomingHttpHeaders } from "node:http2";
import type { AddressInfo } from "node:net";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider } from "@opentelemetry/sdk-trace-base";

import { Journal, OpjournalError } from "../src/index.js";
import { traceEntries } from "../src/journal.js";

/** A gRPC peer that records the headers of each request and refuses it (grpc-status 14). */
class RecordingPeer {
  readonly requests: IncomingHttpHeaders[] = [];
  private constructor(private readonly server: Http2Server, readonly baseUrl: string) {}

  static async start(): Promise<RecordingPeer> {
    const server = createServer();
    const listening = new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    await listening;
    const port = (server.address() as AddressInfo).port;
    const peer = new RecordingPeer(server, `http://127.0.0.1:${port}`);
    server.on("stream", (stream, headers) => {
      peer.requests.push(headers);
      stream.on("error", () => {});
      stream.respond({
        ":status": 200,
        "content-type": "application/grpc",
        "grpc-status": "14",
        "grpc-message": "recorded",
      }, { endStream: true });
      stream.resume();
    });
    return peer;
  }

  /** The headers of the only request since the last take. */
  take(): IncomingHttpHeaders {
    assert.equal(this.requests.length, 1, "want exactly one request");
    return this.requests.pop()!;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Makes one lookup against the peer and returns the headers it recorded. */
async function oneCall(peer: RecordingPeer, journal: Journal): Promise<IncomingHttpHeaders> {
  await assert.rejects(journal.lookup("op-trace-1"), (e: unknown) => {
    assert.ok(e instanceof OpjournalError, `want an OpjournalError, got ${String(e)}`);
    assert.equal(e.code, "UNAVAILABLE", "the peer's grpc-status 14, not a client-side failure");
    return true;
  });
  const h = peer.take();
  assert.equal(h[":path"], "/opjournal.v1.JournalService/Lookup");
  assert.equal(h["content-type"], "application/grpc+proto");
  return h;
}

const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

describe("trace context", () => {
  let peer: RecordingPeer;
  let journal: Journal;

  before(async () => {
    peer = await RecordingPeer.start();
    journal = new Journal({ baseUrl: peer.baseUrl, timeoutMs: 5_000 });
  });
  after(async () => {
    journal?.close();
    await peer?.stop();
    context.disable();
    propagation.disable();
    trace.disable();
  });

  // First, before anything is registered: @opentelemetry/api is installed
  // here, but with no propagator and no span nothing is sent.
  test("by default (no OpenTelemetry set up) no trace header is sent", async () => {
    const h = await oneCall(peer, journal);
    assert.equal(h.traceparent, undefined);
    assert.equal(h.tracestate, undefined);
    assert.equal(h.baggage, undefined);
  });

  test("the active span of a real BasicTracerProvider travels as traceparent, with baggage", async () => {
    const cm = new AsyncLocalStorageContextManager().enable();
    assert.ok(context.setGlobalContextManager(cm));
    assert.ok(propagation.setGlobalPropagator(new CompositePropagator({
      propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()],
    })));
    const provider = new BasicTracerProvider();
    assert.ok(trace.setGlobalTracerProvider(provider));

    // Outside any span: still nothing.
    const outside = await oneCall(peer, journal);
    assert.equal(outside.traceparent, undefined);

    const tracer = trace.getTracer("opjournal-client-test");
    const { h, traceId, spanId } = await tracer.startActiveSpan("agent step", async (span) => {
      try {
        const bag = propagation.createBaggage({ tenant: { value: "acme" } });
        const h = await context.with(propagation.setBaggage(context.active(), bag), () => oneCall(peer, journal));
        return { h, traceId: span.spanContext().traceId, spanId: span.spanContext().spanId };
      } finally {
        span.end();
      }
    });
    assert.match(traceId, /^[0-9a-f]{32}$/);
    assert.equal(h.traceparent, `00-${traceId}-${spanId}-01`);
    assert.equal(h.baggage, "tenant=acme");

    // A second Journal (the loaded API is cached) in another span: its ids.
    const other = new Journal({ baseUrl: peer.baseUrl, timeoutMs: 5_000 });
    try {
      await tracer.startActiveSpan("another step", async (span) => {
        try {
          const h2 = await oneCall(peer, other);
          assert.equal(h2.traceparent, `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`);
          assert.notEqual(span.spanContext().traceId, traceId);
          assert.equal(h2.baggage, undefined);
        } finally {
          span.end();
        }
      });
    } finally {
      other.close();
    }
    await provider.shutdown();
  });

  test("traceContext sends the hook's headers instead of the active context", async () => {
    let calls = 0;
    const hooked = new Journal({
      baseUrl: peer.baseUrl,
      timeoutMs: 5_000,
      traceContext: () => {
        calls++;
        return { traceparent: TRACEPARENT, tracestate: "vendor=abc,other=1", baggage: "k=v" };
      },
    });
    try {
      const tracer = trace.getTracer("opjournal-client-test");
      const h = await tracer.startActiveSpan("ignored span", async (span) => {
        try {
          return await oneCall(peer, hooked);
        } finally {
          span.end();
        }
      });
      assert.equal(h.traceparent, TRACEPARENT, "the hook wins over the active span");
      assert.equal(h.tracestate, "vendor=abc,other=1");
      assert.equal(h.baggage, "k=v");
      assert.equal(calls, 1, "called once per call");
    } finally {
      hooked.close();
    }
  });

  test("traceContext: other names, bad values and a failing hook are dropped, the call goes on", async () => {
    const bad = new Journal({
      baseUrl: peer.baseUrl,
      timeoutMs: 5_000,
      traceContext: () => ({
        TraceParent: TRACEPARENT, // a name in another case is the same header
        tracestate: "a=1\r\nx-injected: yes",
        baggage: "k=\u00e9t\u00e9",
        authorization: "Bearer stolen",
        "x-other": "1",
        ":path": "/elsewhere",
      }),
    });
    const throwing = new Journal({
      baseUrl: peer.baseUrl,
      timeoutMs: 5_000,
      traceContext: () => {
        throw new Error("tracing is broken");
      },
    });
    try {
      const h = await oneCall(peer, bad);
      assert.equal(h.traceparent, TRACEPARENT);
      assert.equal(h.tracestate, undefined, "a newline is dropped");
      assert.equal(h.baggage, undefined, "non-ASCII is dropped");
      assert.equal(h.authorization, undefined);
      assert.equal(h["x-other"], undefined);
      assert.equal(h["x-injected"], undefined);

      const t = await oneCall(peer, throwing);
      assert.equal(t.traceparent, undefined);
    } finally {
      bad.close();
      throwing.close();
    }
  });

  test("traceEntries keeps the three W3C names with printable ASCII values", () => {
    assert.deepEqual(traceEntries(undefined), []);
    assert.deepEqual(traceEntries(null), []);
    assert.deepEqual(traceEntries("traceparent"), []);
    assert.deepEqual(traceEntries({
      traceparent: TRACEPARENT,
      tracestate: "",
      baggage: 42,
      other: "x",
    }), [["traceparent", TRACEPARENT]]);
    assert.deepEqual(traceEntries({ BAGGAGE: "a=1; p", tracestate: "x=\t1" }), [["baggage", "a=1; p"]]);
    assert.deepEqual(traceEntries({ traceparent: "a\u0000b", tracestate: "x\u007f" }), []);
  });
});
