/**
 * A CheckResponseMessage (check-response.ts) as envoy.service.auth.v3.CheckResponse's protobuf bytes,
 * written directly: the sizes first, then one Buffer filled in place. protobufjs's generated encoder
 * built a writer operation (an object) per field and a fork per nested message, ~3.6 KB allocated for
 * scenario 3's allow; this allocates the Buffer only. The bytes are protobufjs's: the same fields in
 * field-number order, every field present in the message written (an empty string or a zero too), so
 * test/envoy/check-service.test.ts holds them to proto-loader's encoding and
 * test/envoy/check-response-wire.test.ts to protobufjs's. Strings are written as Node writes UTF-8.
 * Pure.
 *
 * Field numbers (vendored protos): CheckResponse status=1 denied_response=2 ok_response=3;
 * google.rpc.Status code=1 message=2; DeniedHttpResponse status=1 headers=2 body=3; HttpStatus code=1;
 * OkHttpResponse headers=2 headers_to_remove=5 response_headers_to_add=6 query_parameters_to_set=7;
 * HeaderValueOption header=1 append_action=3; HeaderValue key=1 value=2; QueryParameter key=1 value=2.
 */
import type { CheckResponseMessage } from "./check-response-message.ts";

type HeaderOptions = NonNullable<CheckResponseMessage["ok_response"]>["headers"];

const VARINT = 0;
const BYTES = 2;
const tag = (field: number, wireType: number) => (field << 3) | wireType;

export function encodeCheckResponse(message: CheckResponseMessage): Buffer {
  const statusSize = statusLength(message.status);
  let size = 1 + varintLength(statusSize) + statusSize;
  const denied = message.denied_response;
  let deniedSize = 0;
  if (denied != null) {
    deniedSize = deniedLength(denied);
    size += 1 + varintLength(deniedSize) + deniedSize;
  }
  const ok = message.ok_response;
  let okSize = 0;
  if (ok != null) {
    okSize = okLength(ok);
    size += 1 + varintLength(okSize) + okSize;
  }
  const out = new Wire(size);
  out.varint(tag(1, BYTES));
  out.varint(statusSize);
  out.int32Field(1, message.status.code);
  out.stringField(2, message.status.message);
  if (denied != null) {
    out.varint(tag(2, BYTES));
    out.varint(deniedSize);
    out.varint(tag(1, BYTES));
    out.varint(int32FieldLength(denied.status.code));
    out.int32Field(1, denied.status.code);
    out.headerOptions(2, denied.headers);
    out.stringField(3, denied.body);
  }
  if (ok != null) {
    out.varint(tag(3, BYTES));
    out.varint(okSize);
    out.headerOptions(2, ok.headers);
    for (const name of ok.headers_to_remove) out.stringField(5, name);
    if (ok.response_headers_to_add != null) out.headerOptions(6, ok.response_headers_to_add);
    if (ok.query_parameters_to_set != null) out.keyValues(7, ok.query_parameters_to_set);
  }
  return out.done();
}

function statusLength(status: CheckResponseMessage["status"]): number {
  return int32FieldLength(status.code) + stringFieldLength(status.message);
}

function deniedLength(denied: NonNullable<CheckResponseMessage["denied_response"]>): number {
  const statusSize = int32FieldLength(denied.status.code);
  return 1 + varintLength(statusSize) + statusSize + headerOptionsLength(denied.headers) + stringFieldLength(denied.body);
}

function okLength(ok: NonNullable<CheckResponseMessage["ok_response"]>): number {
  let size = headerOptionsLength(ok.headers);
  for (const name of ok.headers_to_remove) size += stringFieldLength(name);
  if (ok.response_headers_to_add != null) size += headerOptionsLength(ok.response_headers_to_add);
  if (ok.query_parameters_to_set != null) {
    for (const parameter of ok.query_parameters_to_set) {
      const length = headerLength(parameter);
      size += 1 + varintLength(length) + length;
    }
  }
  return size;
}

/** Each option as a length-delimited field (its own tag's one byte included). */
function headerOptionsLength(options: HeaderOptions): number {
  let size = 0;
  for (const option of options) {
    const length = headerOptionLength(option);
    size += 1 + varintLength(length) + length;
  }
  return size;
}

function headerOptionLength(option: HeaderOptions[number]): number {
  const header = headerLength(option.header);
  return 1 + varintLength(header) + header + int32FieldLength(option.append_action);
}

/** A HeaderValue's or a QueryParameter's size: both are {key=1, value=2}. */
function headerLength(header: { key: string; value: string }): number {
  return stringFieldLength(header.key) + stringFieldLength(header.value);
}

function stringFieldLength(value: string): number {
  const bytes = Buffer.byteLength(value);
  return 1 + varintLength(bytes) + bytes;
}

function int32FieldLength(value: number): number {
  return 1 + (value < 0 ? 10 : varintLength(value));
}

function varintLength(value: number): number {
  return value < 0x80 ? 1 : value < 0x4000 ? 2 : value < 0x200000 ? 3 : value < 0x10000000 ? 4 : 5;
}

/** A Buffer of the message's exact size, filled front to back; every field number here is below 16 (one tag byte). */
class Wire {
  readonly #buf: Buffer;
  #at = 0;

  constructor(size: number) {
    this.#buf = Buffer.allocUnsafe(size);
  }

  varint(value: number): void {
    let v = value >>> 0;
    while (v >= 0x80) {
      this.#buf[this.#at++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.#buf[this.#at++] = v;
  }

  /** protobuf's int32: a negative value is sign-extended to ten bytes. */
  int32Field(field: number, value: number): void {
    this.varint(tag(field, VARINT));
    if (value >= 0) return this.varint(value);
    this.varint(value);
    // The varint above wrote the low 32 bits in five groups of seven, the last (bits 28-34) without its
    // continuation bit: set it and bits 32-34, then the sign extension (bits 35-63, all ones).
    this.#buf[this.#at - 1] = this.#buf[this.#at - 1]! | 0xf0;
    for (let i = 0; i < 4; i++) this.#buf[this.#at++] = 0xff;
    this.#buf[this.#at++] = 0x01;
  }

  stringField(field: number, value: string): void {
    this.varint(tag(field, BYTES));
    this.varint(Buffer.byteLength(value));
    this.#at += this.#buf.write(value, this.#at);
  }

  headerOptions(field: number, options: HeaderOptions): void {
    for (const option of options) {
      this.varint(tag(field, BYTES));
      this.varint(headerOptionLength(option));
      this.varint(tag(1, BYTES));
      this.varint(headerLength(option.header));
      this.stringField(1, option.header.key);
      this.stringField(2, option.header.value);
      this.int32Field(3, option.append_action);
    }
  }

  /** Messages of {key=1, value=2}, each a length-delimited field (QueryParameter). */
  keyValues(field: number, pairs: ReadonlyArray<{ key: string; value: string }>): void {
    for (const pair of pairs) {
      this.varint(tag(field, BYTES));
      this.varint(headerLength(pair));
      this.stringField(1, pair.key);
      this.stringField(2, pair.value);
    }
  }

  done(): Buffer {
    if (this.#at !== this.#buf.length) throw new Error(`CheckResponse encoding wrote ${this.#at} of ${this.#buf.length} bytes`);
    return this.#buf;
  }
}
