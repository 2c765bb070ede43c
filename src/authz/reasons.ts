/**
 * One table from reason code to gRPC code and HTTP status (DESIGN.md "Denials"; FUN-12: 401
 * unauthenticated, 403 exists-but-forbidden, 404 does not exist).
 */
import type { ReasonCode } from "./decision.ts";

/** google.rpc.Code values Envoy reads from CheckResponse.status. */
export const GrpcCode = {
  OK: 0,
  INVALID_ARGUMENT: 3,
  NOT_FOUND: 5,
  PERMISSION_DENIED: 7,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

export interface ReasonStatus {
  readonly http: number;
  readonly grpc: number;
}

const unauthenticated = { http: 401, grpc: GrpcCode.UNAUTHENTICATED };
const forbidden = { http: 403, grpc: GrpcCode.PERMISSION_DENIED };
const notFound = { http: 404, grpc: GrpcCode.NOT_FOUND };

export const REASONS: Readonly<Record<ReasonCode, ReasonStatus>> = {
  "missing-token": unauthenticated,
  "invalid-token": unauthenticated,
  "wrong-audience": unauthenticated,
  "cluster-mismatch": forbidden,
  "installation-mismatch": forbidden,
  "can-view-denied": forbidden,
  "user-sar-denied": forbidden,
  "installation-unavailable": forbidden,
  "user-unavailable": forbidden,
  "impersonation-forbidden": forbidden,
  "revoked": forbidden,
  "unknown-cluster": notFound,
  "not-found": notFound,
  "bad-request": { http: 400, grpc: GrpcCode.INVALID_ARGUMENT },
  "method-not-allowed": { http: 405, grpc: GrpcCode.PERMISSION_DENIED },
  "project-not-found": notFound,
  "no-role": forbidden,
  "role-denied": forbidden,
  "dependency-unavailable": { http: 503, grpc: GrpcCode.UNAVAILABLE },
  "no-policy": forbidden,
  "internal-error": { http: 500, grpc: GrpcCode.INTERNAL },
};

export const REASON_CODES = Object.keys(REASONS) as ReasonCode[];
