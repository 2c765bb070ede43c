/**
 * Enough of the OpenFGA HTTP API for portcullis's can_view gate: `POST /stores/{store_id}/check`.
 * Everything else is a 404, as OpenFGA answers unknown routes.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { type Fault, HttpFake, json } from "./http-fake.ts";

export interface TupleKey {
  readonly user: string;
  readonly relation: string;
  readonly object: string;
}

export class FakeOpenFga extends HttpFake {
  /** A well-formed ULID: the SDK refuses store ids that are not. */
  readonly storeId = "01HVMMBCMGZNT3SED4Z17ECXCA";
  fault: Fault = "healthy";
  allowed: (tuple: TupleKey) => boolean = () => true;
  readonly checks: TupleKey[] = [];

  protected handle(req: IncomingMessage, res: ServerResponse, body: string): void {
    if (req.method !== "POST" || req.url !== `/stores/${this.storeId}/check`) {
      json(res, 404, { code: "undefined_endpoint", message: "Not Found" });
      return;
    }
    this.answer(this.fault, res, () => {
      let tuple: TupleKey;
      try {
        tuple = (JSON.parse(body) as { tuple_key: TupleKey }).tuple_key;
      } catch {
        json(res, 400, { code: "invalid_request", message: "body is not JSON" });
        return;
      }
      this.checks.push(tuple);
      json(res, 200, { allowed: this.allowed(tuple), resolution: "" });
    });
  }
}
