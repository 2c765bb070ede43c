/**
 * HTTP GETs to OIDC providers (discovery documents, JWKS, UserInfo): https only, redirects never
 * followed, a deadline per call and a cap on the response size, over one keep-alive pool that
 * trusts the system roots plus, when configured, an extra CA bundle (a private provider's CA, or a
 * test's). Every failure is DependencyUnavailable: the caller answers 503, never an allow.
 */
import { rootCertificates } from "node:tls";
import type { FetchImplementation } from "jose";
import { Agent, request } from "undici";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import { withDeadline } from "../dependencies/deadline.ts";
import type { SpanAttributes } from "../tracing/spans.ts";

export const OIDC_PROVIDER = "oidc-provider";

export interface ProviderHttpOptions {
  /** PEM bundle trusted in addition to the system roots. */
  readonly ca?: string;
  readonly timeoutMs: number;
  readonly maxResponseBytes: number;
}

export interface ProviderResponse {
  readonly status: number;
  readonly body: Buffer;
}

export class ProviderHttp {
  readonly #agent: Agent;
  readonly #options: ProviderHttpOptions;

  constructor(options: ProviderHttpOptions) {
    this.#options = options;
    this.#agent = new Agent({
      // HTTP/1.1 only, as for the API servers: an aborted HTTP/2 stream can wedge Node's native send
      // loop (docs/upstream/undici-h2-abort-freeze.md).
      allowH2: false,
      connect: options.ca === undefined ? {} : { ca: [...rootCertificates, options.ca] },
    });
  }

  get(url: string, headers: Readonly<Record<string, string>> = {}, signal?: AbortSignal): Promise<ProviderResponse> {
    return withDeadline(OIDC_PROVIDER, this.#options.timeoutMs, async (deadline) => {
      if (new URL(url).protocol !== "https:") throw new DependencyUnavailable(OIDC_PROVIDER, "not an https URL");
      const response = await request(url, {
        method: "GET",
        headers: { accept: "application/json", ...headers },
        dispatcher: this.#agent,
        signal: signal === undefined ? deadline : AbortSignal.any([deadline, signal]),
      });
      const max = this.#options.maxResponseBytes;
      if (Number(response.headers["content-length"] ?? 0) > max) {
        response.body.destroy();
        throw new DependencyUnavailable(OIDC_PROVIDER, `response larger than ${max} bytes`);
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of response.body) {
        size += (chunk as Buffer).length;
        if (size > max) {
          response.body.destroy();
          throw new DependencyUnavailable(OIDC_PROVIDER, `response larger than ${max} bytes`);
        }
        chunks.push(chunk as Buffer);
      }
      return { status: response.statusCode, body: Buffer.concat(chunks) };
    }, fetchSpanAttributes(url));
  }

  /** The status and the parsed JSON body; a body that is not JSON is the provider's failure. */
  async json(url: string, headers?: Readonly<Record<string, string>>): Promise<{ status: number; json: unknown }> {
    const { status, body } = await this.get(url, headers);
    try {
      return { status, json: JSON.parse(body.toString("utf8")) as unknown };
    } catch {
      throw new DependencyUnavailable(OIDC_PROVIDER, `answered ${status} without JSON`);
    }
  }

  /** jose's `[customFetch]` option: JWKS fetches go through the same pool, limits and CA. */
  readonly jwksFetch: FetchImplementation = async (url, init) => {
    const { status, body } = await this.get(url, Object.fromEntries(init.headers), init.signal);
    return new Response(new Uint8Array(body), { status, headers: { "content-type": "application/json" } });
  };

  close(): Promise<void> {
    return this.#agent.close();
  }
}

/** A trace names the document fetched, without its query string. */
function fetchSpanAttributes(url: string): SpanAttributes {
  const parsed = URL.parse(url);
  return { "http.request.method": "GET", "url.full": parsed === null ? "(not a URL)" : `${parsed.origin}${parsed.pathname}` };
}
