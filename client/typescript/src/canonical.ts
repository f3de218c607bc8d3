// RFC 8785 canonical JSON, with the journal's two rules (canonjson, Go):
// null members are dropped at any depth (null array elements stay), and a
// number beyond ±(2^53−1) is refused rather than rounded. The key of a
// journaled agent tool hashes its key fields in this form, so that the
// same intent gives the same key whatever the model's spelling (817, 817.0
// and 8.17e2 are one number, member order does not matter).

/** The nesting limit of canonjson.MaxDepth. */
export const MAX_DEPTH = 64;

const LONE_SURROGATE = /\p{Cs}/u;

/** Why canonicalJson refused a value; path is an RFC 6901 pointer to it. */
export class CanonicalJsonError extends Error {
  override name = "CanonicalJsonError";
  constructor(readonly path: string, message: string) {
    super(`${path || "the value"} ${message}`);
  }
}

/**
 * The canonical JSON text of v: objects with members sorted by UTF-16 code
 * units, strings and numbers as ECMAScript's JSON.stringify writes them
 * (which is what RFC 8785 prescribes), no whitespace. Undefined and null
 * members are dropped. Throws a CanonicalJsonError for what the journal
 * refuses: NaN, infinities, numbers beyond ±Number.MAX_SAFE_INTEGER,
 * lone surrogates, nesting deeper than MAX_DEPTH, and values JSON has not
 * (bigints, functions, symbols, undefined array elements).
 */
export function canonicalJson(v: unknown): string {
  return encode(v, "", 0);
}

function encode(v: unknown, path: string, depth: number): string {
  switch (typeof v) {
    case "string":
      if (LONE_SURROGATE.test(v)) throw new CanonicalJsonError(path, "is not well-formed Unicode (a lone surrogate)");
      return JSON.stringify(v);
    case "boolean":
      return v ? "true" : "false";
    case "number":
      if (!Number.isFinite(v)) throw new CanonicalJsonError(path, "is not a finite number");
      if (Math.abs(v) > Number.MAX_SAFE_INTEGER) {
        throw new CanonicalJsonError(path, "is a number outside ±(2^53-1), beyond what JSON carries exactly; send it as a string");
      }
      return JSON.stringify(v); // ECMAScript's Number::toString; -0 is "0"
    case "object": {
      if (v === null) return "null";
      if (depth >= MAX_DEPTH) throw new CanonicalJsonError(path, `nests deeper than ${MAX_DEPTH}`);
      if (Array.isArray(v)) {
        return "[" + v.map((e, i) => {
          if (e === undefined) throw new CanonicalJsonError(`${path}/${i}`, "is undefined");
          return encode(e, `${path}/${i}`, depth + 1);
        }).join(",") + "]";
      }
      const proto = Object.getPrototypeOf(v) as unknown;
      if (proto !== Object.prototype && proto !== null) throw new CanonicalJsonError(path, "is not a plain object");
      const names = Object.keys(v).sort(); // UTF-16 code unit order, as RFC 8785 sorts
      const members: string[] = [];
      for (const name of names) {
        const e = (v as Record<string, unknown>)[name];
        if (e === undefined || e === null) continue;
        const p = `${path}/${name.replace(/~/g, "~0").replace(/\//g, "~1")}`;
        if (LONE_SURROGATE.test(name)) throw new CanonicalJsonError(p, "has a name that is not well-formed Unicode");
        members.push(JSON.stringify(name) + ":" + encode(e, p, depth + 1));
      }
      return "{" + members.join(",") + "}";
    }
    default:
      throw new CanonicalJsonError(path, `is a ${typeof v}, which JSON has not`);
  }
}
