// Strict decoding of Envoy configs into envoy.config.bootstrap.v3.Bootstrap.
//
// protobufjs's fromObject silently drops unknown fields and coerces types, so
// a typo in a shipped Envoy config would only surface when Envoy rejects it.
// We first walk the JSON against protobufjs reflection, rejecting what Envoy's
// proto3-JSON parser rejects (and converting the well-known types' JSON forms,
// which fromObject does not understand), then build the real message.
import { readdirSync } from "node:fs";
import { join } from "node:path";
// Registers descriptor.proto (imported by the validate/udpa annotations) with
// protobufjs's bundled well-known types, which the vendored root relies on.
import "@grpc/proto-loader";
import protobuf from "protobufjs";
import { parse } from "yaml";
import { PROTO_ROOT } from "./protos.ts";

export type DecodeResult =
  | { ok: true; message: protobuf.Message }
  | { ok: false; errors: string[] };

let root: protobuf.Root | undefined;

/** Every vendored proto, so any type an Any may name can be resolved. */
export function envoyRoot(): protobuf.Root {
  if (!root) {
    const r = new protobuf.Root();
    // Resolve imports against the single include root, like protoc -I.
    r.resolvePath = (_origin, target) => join(PROTO_ROOT, target);
    // Plus all bundled well-known types, so an Any may name any of them.
    const wellKnown = ["any", "duration", "empty", "field_mask", "struct", "timestamp", "wrappers"];
    r.loadSync([...protoFiles(), ...wellKnown.map((f) => `google/protobuf/${f}.proto`)], {
      keepCase: true,
    }).resolveAll();
    root = r;
  }
  return root;
}

// Import names (paths relative to PROTO_ROOT) of all vendored protos.
function protoFiles(): string[] {
  return readdirSync(PROTO_ROOT, { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".proto"));
}

/** Decodes an Envoy bootstrap given as YAML or JSON text. */
export function decodeBootstrap(text: string): DecodeResult {
  let value: unknown;
  try {
    value = parse(text);
  } catch (err) {
    return { ok: false, errors: [`parse error: ${(err as Error).message}`] };
  }
  return decodeMessage("envoy.config.bootstrap.v3.Bootstrap", value);
}

/** Strictly decodes a JSON value (proto3 JSON mapping) as the named message type. */
export function decodeMessage(typeName: string, value: unknown): DecodeResult {
  return decodeAs(envoyRoot().lookupType(typeName), value);
}

/**
 * decodeMessage for a message type of another proto tree (Istio's API, for the generated Istio
 * objects); an Any inside it still resolves against Envoy's protos.
 */
export function decodeAs(type: protobuf.Type, value: unknown): DecodeResult {
  const errors: string[] = [];
  const plain = convertMessage(type, value, "", errors);
  if (errors.length > 0) return { ok: false, errors };
  try {
    const message = type.fromObject(plain as Record<string, unknown>);
    const problem = type.verify(message);
    return problem ? { ok: false, errors: [problem] } : { ok: true, message };
  } catch (err) {
    return { ok: false, errors: [(err as Error).message] };
  }
}

const ANY_URL = /^type\.googleapis\.com\/([A-Za-z_][\w.]*)$/;
const DURATION = /^(-)?(\d+)(?:\.(\d{1,9}))?s$/;
const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.(\d{1,9}))?(?:Z|[+-]\d{2}:\d{2})$/;
const MAX_DURATION_SECONDS = 315_576_000_000; // ±10000 years, the proto's documented range
const WRAPPERS = new Set(
  ["Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes"].map(
    (t) => `.google.protobuf.${t}Value`,
  ),
);
// Types whose JSON form is not an object of their fields; inside an Any they sit under "value".
const SPECIAL_JSON = new Set([
  ...WRAPPERS,
  ".google.protobuf.Any",
  ".google.protobuf.Duration",
  ".google.protobuf.Timestamp",
  ".google.protobuf.FieldMask",
  ".google.protobuf.Struct",
  ".google.protobuf.Value",
  ".google.protobuf.ListValue",
]);

const at = (path: string) => path || "<root>";
const child = (path: string, key: string) => (path ? `${path}.${key}` : key);

function describe(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return "array";
  if (typeof value === "object") return "object";
  const json = JSON.stringify(value);
  return `${typeof value} ${json.length > 40 ? `${json.slice(0, 40)}…` : json}`;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

// Returns the message in protobufjs fromObject form (proto field names, well-known
// types expanded), recording every problem in `errors`.
function convertMessage(type: protobuf.Type, value: unknown, path: string, errors: string[]): unknown {
  const name = type.fullName;
  if (WRAPPERS.has(name)) return { value: convertField(type.fields["value"]!, value, path, errors) };
  switch (name) {
    case ".google.protobuf.Any":
      return convertAny(value, path, errors);
    case ".google.protobuf.Duration":
      return convertDuration(value, path, errors);
    case ".google.protobuf.Timestamp":
      return convertTimestamp(value, path, errors);
    case ".google.protobuf.FieldMask":
      if (typeof value === "string") {
        // JSON paths are lowerCamel; the message holds proto field names.
        const paths = value.split(",").filter((p) => p !== "");
        return { paths: paths.map((p) => p.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)) };
      }
      errors.push(`${at(path)}: expected FieldMask string, got ${describe(value)}`);
      return undefined;
    case ".google.protobuf.Struct":
      if (isObject(value)) return convertStruct(value);
      errors.push(`${at(path)}: expected object for Struct, got ${describe(value)}`);
      return undefined;
    case ".google.protobuf.ListValue":
      if (Array.isArray(value)) return { values: value.map(convertJsonValue) };
      errors.push(`${at(path)}: expected array for ListValue, got ${describe(value)}`);
      return undefined;
    case ".google.protobuf.Value":
      return convertJsonValue(value);
  }

  if (!isObject(value)) {
    errors.push(`${at(path)}: expected object for ${name.slice(1)}, got ${describe(value)}`);
    return undefined;
  }
  const out: Record<string, unknown> = {};
  const oneofs = new Map<string, string>(); // oneof name -> member already set
  for (const [key, v] of Object.entries(value)) {
    const field = Object.hasOwn(type.fields, key) ? type.fields[key] : jsonNames(type).get(key);
    if (!field) {
      errors.push(`${at(path)}: unknown field "${key}"`);
      continue;
    }
    if (Object.hasOwn(out, field.name)) {
      errors.push(`${at(path)}: field "${field.name}" is set twice`);
      continue;
    }
    // proto3 JSON: null means "not set", except for google.protobuf.Value.
    if (v === null && field.resolvedType?.fullName !== ".google.protobuf.Value") continue;
    const oneof = field.partOf;
    if (oneof) {
      const other = oneofs.get(oneof.name);
      if (other !== undefined) {
        errors.push(`${at(path)}: oneof "${oneof.name}" has more than one member set: "${other}" and "${field.name}"`);
        continue;
      }
      oneofs.set(oneof.name, field.name);
    }
    out[field.name] = convertFieldValue(field, v, child(path, key), errors);
  }
  return out;
}

const jsonNameCache = new WeakMap<protobuf.Type, Map<string, protobuf.Field>>();

// Envoy (protobuf's JSON parser) also accepts lowerCamel names: foo_bar -> fooBar.
function jsonNames(type: protobuf.Type): Map<string, protobuf.Field> {
  let names = jsonNameCache.get(type);
  if (!names) {
    names = new Map(type.fieldsArray.map((f) => [f.name.replace(/_(.)/g, (_, c: string) => c.toUpperCase()), f]));
    jsonNameCache.set(type, names);
  }
  return names;
}

function convertFieldValue(field: protobuf.Field, value: unknown, path: string, errors: string[]): unknown {
  if (field.map) {
    if (!isObject(value)) {
      errors.push(`${path}: expected object (map), got ${describe(value)}`);
      return undefined;
    }
    const keyType = (field as unknown as protobuf.MapField).keyType;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      // Map keys are JSON strings; non-string key types are written in their string form.
      const keyOk =
        keyType === "string" ||
        (keyType === "bool" ? k === "true" || k === "false" : checkScalar(keyType, k, "", []) !== undefined);
      if (!keyOk) {
        errors.push(`${path}: invalid ${keyType} map key "${k}"`);
        continue;
      }
      out[k] = convertField(field, v, `${path}["${k}"]`, errors);
    }
    return out;
  }
  if (field.repeated) {
    if (!Array.isArray(value)) {
      errors.push(`${path}: expected array, got ${describe(value)}`);
      return undefined;
    }
    return value.map((v, i) => convertField(field, v, `${path}[${i}]`, errors));
  }
  return convertField(field, value, path, errors);
}

// One value of the field's element type.
function convertField(field: protobuf.Field, value: unknown, path: string, errors: string[]): unknown {
  const t = field.resolvedType;
  if (t instanceof protobuf.Type) return convertMessage(t, value, path, errors);
  if (t instanceof protobuf.Enum) {
    const ok = Object.hasOwn(typeof value === "string" ? t.values : t.valuesById, String(value));
    if (!ok) errors.push(`${path}: invalid value ${describe(value)} for enum ${t.fullName.slice(1)}`);
    return value;
  }
  return checkScalar(field.type, value, path, errors);
}

const INT_RANGES: Record<string, [number, number]> = {
  int32: [-(2 ** 31), 2 ** 31 - 1],
  sint32: [-(2 ** 31), 2 ** 31 - 1],
  sfixed32: [-(2 ** 31), 2 ** 31 - 1],
  uint32: [0, 2 ** 32 - 1],
  fixed32: [0, 2 ** 32 - 1],
};
const INT64 = new Set(["int64", "sint64", "sfixed64", "uint64", "fixed64"]);

// Checks a scalar in its proto3 JSON form and returns it in fromObject form.
function checkScalar(type: string, value: unknown, path: string, errors: string[]): unknown {
  const fail = (expected: string) => {
    errors.push(`${path}: expected ${expected}, got ${describe(value)}`);
    return undefined;
  };
  switch (type) {
    case "string":
      return typeof value === "string" ? value : fail("string");
    case "bool":
      return typeof value === "boolean" ? value : fail("bool");
    case "double":
    case "float": {
      if (typeof value === "number") return value;
      const n = typeof value === "string" && value.trim() !== "" ? Number(value) : NaN;
      return !Number.isNaN(n) || value === "NaN" ? n : fail(type);
    }
    case "bytes":
      // Standard or URL-safe base64, as protobuf's JSON parser accepts.
      return typeof value === "string" && /^[A-Za-z0-9+/_-]*={0,2}$/.test(value)
        ? Buffer.from(value, "base64")
        : fail("base64 bytes");
  }
  const unsigned = type.startsWith("u") || type.startsWith("fixed");
  if (INT64.has(type)) {
    // int64 may be a JSON number (if exact) or a decimal string.
    if (typeof value === "number" && Number.isSafeInteger(value) && (!unsigned || value >= 0)) return value;
    if (typeof value === "string" && (unsigned ? /^\d+$/ : /^-?\d+$/).test(value)) return value;
    return fail(`${type} (integer or decimal string)`);
  }
  const range = INT_RANGES[type];
  if (!range) throw new Error(`unhandled scalar type ${type}`);
  const n = typeof value === "string" && /^-?\d+$/.test(value) ? Number(value) : value;
  return typeof n === "number" && Number.isInteger(n) && n >= range[0] && n <= range[1] ? n : fail(type);
}

function convertAny(value: unknown, path: string, errors: string[]): unknown {
  if (!isObject(value)) {
    errors.push(`${at(path)}: expected object for Any, got ${describe(value)}`);
    return undefined;
  }
  const url = value["@type"];
  const typeName = typeof url === "string" ? ANY_URL.exec(url)?.[1] : undefined;
  if (typeName === undefined) {
    errors.push(`${at(path)}: Any needs "@type": "type.googleapis.com/<full.name>", got ${describe(url)}`);
    return undefined;
  }
  const type = envoyRoot().lookup(typeName);
  if (!(type instanceof protobuf.Type)) {
    errors.push(`${at(path)}: unknown type "${typeName}" in "@type"`);
    return undefined;
  }
  const { "@type": _, ...rest } = value;
  const before = errors.length;
  let inner: unknown;
  if (SPECIAL_JSON.has(type.fullName)) {
    const extra = Object.keys(rest).filter((k) => k !== "value");
    for (const k of extra) errors.push(`${at(path)}: unknown field "${k}" (${typeName} in an Any takes only "value")`);
    inner = convertMessage(type, rest["value"], child(path, "value"), errors);
  } else {
    inner = convertMessage(type, rest, path, errors);
  }
  if (errors.length > before) return undefined;
  // Pack it as Envoy would: type_url plus the encoded message.
  return { type_url: url, value: type.encode(type.fromObject(inner as Record<string, unknown>)).finish() };
}

function convertDuration(value: unknown, path: string, errors: string[]): unknown {
  const m = typeof value === "string" ? DURATION.exec(value) : null;
  const seconds = Number(m?.[2]);
  if (!m || seconds > MAX_DURATION_SECONDS) {
    errors.push(`${at(path)}: expected duration string like "5s" or "0.25s", got ${describe(value)}`);
    return undefined;
  }
  const sign = m[1] ? -1 : 1;
  const nanos = Number((m[3] ?? "").padEnd(9, "0"));
  return { seconds: sign * seconds, nanos: sign * nanos };
}

function convertTimestamp(value: unknown, path: string, errors: string[]): unknown {
  const m = typeof value === "string" ? TIMESTAMP.exec(value) : null;
  const ms = m ? Date.parse(value as string) : NaN;
  if (!m || Number.isNaN(ms)) {
    errors.push(`${at(path)}: expected RFC 3339 timestamp string, got ${describe(value)}`);
    return undefined;
  }
  return { seconds: Math.floor(ms / 1000), nanos: Number((m[1] ?? "").padEnd(9, "0")) };
}

// google.protobuf.Struct/Value/ListValue: free JSON, mapped onto the proto's fields.
function convertStruct(value: Record<string, unknown>): unknown {
  return { fields: Object.fromEntries(Object.entries(value).map(([k, v]) => [k, convertJsonValue(v)])) };
}

// protobufjs's bundled struct.proto names Value's fields in lowerCamel whatever keepCase says.
function convertJsonValue(value: unknown): unknown {
  if (value === null) return { nullValue: "NULL_VALUE" };
  if (Array.isArray(value)) return { listValue: { values: value.map(convertJsonValue) } };
  if (isObject(value)) return { structValue: convertStruct(value) };
  if (typeof value === "number") return { numberValue: value };
  if (typeof value === "boolean") return { boolValue: value };
  return { stringValue: String(value) };
}
