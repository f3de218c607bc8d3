// Payloads and results travel as JSON objects (google.protobuf.Struct).

import type { JsonObject } from "@bufbuild/protobuf";
import { invalidArgument, type OpjournalError } from "./errors.js";

export type { JsonObject, JsonValue } from "@bufbuild/protobuf";

/** 2^53−1: the largest integer every JSON library carries exactly. */
export const MAX_SAFE_INTEGER = Number.MAX_SAFE_INTEGER;

/**
 * Turns v into a JSON object through its JSON encoding (JSON.stringify, so
 * toJSON methods apply and undefined members are dropped), refusing what the
 * journal would refuse or what JSON would silently change: a non-object,
 * NaN and ±Infinity (JSON.stringify would write null), bigints, and numbers
 * beyond ±(2^53−1) (already rounded). Errors are INVALID_ARGUMENT naming the
 * path ("payload/items/0/amount_minor"), like the journal's.
 */
export function encodeObject(field: string, v: unknown): JsonObject {
  if (v === undefined || v === null) {
    throw invalidArgument(field, "is required (a JSON object; {} for none)");
  }
  if (typeof v !== "object") {
    throw invalidArgument(field, `must be a JSON object; got a ${typeof v}`);
  }
  if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) {
    throw invalidArgument(field, "must be a JSON object; got binary data (parse it first)");
  }
  const paths = new Map<object, string>();
  let problem: OpjournalError | undefined;
  let text: string | undefined;
  try {
    text = JSON.stringify(v, function (this: unknown, key: string, value: unknown): unknown {
      const parent = typeof this === "object" && this !== null ? paths.get(this) : undefined;
      const path = parent === undefined ? field : `${parent}/${key}`;
      switch (typeof value) {
        case "number":
          if (!Number.isFinite(value)) {
            problem = invalidArgument(path, `is ${value}, which JSON cannot carry`);
            throw problem;
          }
          if (Math.abs(value) > MAX_SAFE_INTEGER) {
            problem = invalidArgument(path, `${value} is beyond ±(2^53−1) and would be rounded; send it as a string`);
            throw problem;
          }
          break;
        case "bigint":
          problem = invalidArgument(path, "is a bigint; send a number within ±(2^53−1), or a string");
          throw problem;
        case "object":
          if (value !== null) paths.set(value, path);
          break;
      }
      return value;
    });
  } catch (e) {
    if (problem) throw problem;
    throw invalidArgument(field, `cannot be encoded as JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (text === undefined) {
    throw invalidArgument(field, "must be a JSON object; it encodes as nothing");
  }
  const tree: unknown = JSON.parse(text);
  if (typeof tree !== "object" || tree === null || Array.isArray(tree)) {
    throw invalidArgument(field, `must be a JSON object; it encodes as ${jsonKind(tree)}`);
  }
  return tree as JsonObject;
}

function jsonKind(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  switch (typeof v) {
    case "boolean":
      return "a boolean";
    case "number":
      return "a number";
    case "string":
      return "a string";
  }
  return "an object";
}
