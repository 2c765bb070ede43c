/**
 * The rows of requestInfoFor's tables (test/kube-reading/request-info.test.ts and the tables of the Go
 * packages it mirrors: list-options, field-selectors, label-selectors, object-names): one request
 * per row, in kube's column order, and the table test each runs.
 */
import { describe, expect, it } from "vitest";
import { type KubeHttpRequest, type RequestInfo, requestInfoFor } from "../../../src/kube-reading/request-info.ts";

export interface Input {
  method: string;
  /** Path plus optional "?query"; the path part is passed through literally. */
  url: string;
}

export interface Row {
  name: string;
  input: Input;
  expected: RequestInfo;
}

/** Split at the first "?" only: the path is never normalised by the test either. */
export function toRequest(input: Input): KubeHttpRequest {
  const q = input.url.indexOf("?");
  const path = q < 0 ? input.url : input.url.slice(0, q);
  const query = new URLSearchParams(q < 0 ? "" : input.url.slice(q + 1));
  return { method: input.method, path, query };
}

function pathOf(url: string): string {
  const q = url.indexOf("?");
  return q < 0 ? url : url.slice(0, q);
}

/** A resource request row, in the column order of kube's own table. */
export function r(
  method: string,
  url: string,
  verb: string,
  apiPrefix: string,
  apiGroup: string,
  apiVersion: string,
  namespace: string,
  resource: string,
  subresource: string,
  name: string,
  parts: string[],
): Row {
  return {
    name: `${method} ${url}`,
    input: { method, url },
    expected: {
      isResourceRequest: true,
      verb,
      apiPrefix,
      apiGroup,
      apiVersion,
      namespace,
      resource,
      subresource,
      name,
      parts,
      path: pathOf(url),
    },
  };
}

/** A non-resource request row: the verb is the lower-cased method. */
export function n(method: string, url: string, verb = method.toLowerCase()): Row {
  return { name: `${method} ${url}`, input: { method, url }, expected: { isResourceRequest: false, verb, path: pathOf(url) } };
}

/** kube's error case: the path verb has nothing after it. */
export function parseError(method: string, url: string, apiPrefix: string, apiGroup: string, apiVersion: string): Row {
  const path = pathOf(url);
  return {
    name: `${method} ${url}`,
    input: { method, url },
    expected: {
      isResourceRequest: true,
      verb: method.toLowerCase(),
      apiPrefix,
      apiGroup,
      apiVersion,
      namespace: "",
      resource: "",
      subresource: "",
      name: "",
      parts: [],
      path,
      parseError: `unable to determine kind and namespace from url, ${path}`,
    },
  };
}

export function group(label: string, rows: Row[]): Row[] {
  return rows.map((row) => ({ ...row, name: `${label} | ${row.name}` }));
}

/** A list request on /api/v1/pods whose only interesting output is verb and name. */
export function podsList(query: string, verb: string, name: string): Row {
  return r("GET", `/api/v1/pods?${query}`, verb, "api", "", "v1", "", "pods", "", name, ["pods"]);
}

/** Probe a labelSelector: a valid one lets the fieldSelector name through, an invalid one fails the whole decode. */
export function labelProbe(labelSelector: string, valid: boolean): Row {
  const query = new URLSearchParams({ fieldSelector: "metadata.name=probe", labelSelector }).toString();
  const row = podsList(query, "list", valid ? "probe" : "");
  return { ...row, name: `labelSelector ${JSON.stringify(labelSelector)} is ${valid ? "valid" : "invalid"}` };
}

/** Each row's request read by requestInfoFor equals the row's RequestInfo; row names are unique. */
export function describeRequestInfoTable(title: string, rows: readonly Row[]): void {
  describe(title, () => {
    it("has unique row names", () => {
      const names = rows.map((row) => row.name);
      expect(new Set(names).size, names.filter((x, i) => names.indexOf(x) !== i).join("\n")).toBe(names.length);
    });

    for (const { name, input, expected } of rows) {
      it(name.length > 300 ? `${name.slice(0, 300)}…` : name, () => {
        const actual = requestInfoFor(toRequest(input));
        expect(actual, `${input.method} ${input.url.length > 300 ? `${input.url.slice(0, 300)}…` : input.url}`).toEqual(expected);
      });
    }
  });
}
