/**
 * The error every dependency call ends in when it cannot answer: the check that needed it is a 503,
 * never an allow (authz/error-denials.ts decides that).
 */

import { LoggableError } from "../redaction/error-cause.ts";

/** A remote dependency (OpenFGA, an API server, an index, an OIDC provider) could not answer in time. */
export class DependencyUnavailable extends LoggableError {
  readonly code = "dependency-unavailable";
  readonly dependency: string;
  constructor(dependency: string, message: string, options?: { cause?: unknown }) {
    super(`${dependency}: ${message}`, options);
    this.dependency = dependency;
  }
}
