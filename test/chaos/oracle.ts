/**
 * The load's requests and what each must be answered, decided from the world alone
 * (test/e2e/fundament-world.ts): OpenFGA makes alice, bob and carol members of the organization
 * that owns the cluster and leaves dave out; RBAC makes alice a certificate editor in team-a, bob a
 * cluster-wide certificate viewer, carol a core-resource admin in team-a. portcullis allows a
 * PluginToken request when can_view and the user's SubjectAccessReview both hold (the plugin's own
 * RBAC is enforced by the API server on the swapped token, not by portcullis).
 *
 * Object names are drawn at random so SubjectAccessReviews miss the cache: the load keeps real
 * reviews in flight against the API server, which is what a restart catches.
 */
import type { UserName } from "../e2e/fundament-world.ts";

export type Expected = "allowed" | "user-sar-denied" | "can-view-denied";

export interface ChaosRequest {
  readonly user: UserName;
  readonly path: string;
  readonly expected: Expected;
}

const cert = "/apis/cert-manager.io/v1";
const core = "/api/v1";

// prettier-ignore
const TEMPLATES: ReadonlyArray<{ user: UserName; path: (name: string) => string; expected: Expected }> = [
  { user: "alice", path: (n) => `${cert}/namespaces/team-a/certificates/${n}`, expected: "allowed" },
  { user: "alice", path: (n) => `${cert}/namespaces/team-c/certificates/${n}`, expected: "user-sar-denied" },
  { user: "alice", path: (n) => `${core}/namespaces/team-b/secrets/${n}`, expected: "user-sar-denied" },
  { user: "bob", path: (n) => `${cert}/namespaces/team-c/certificates/${n}`, expected: "allowed" },
  { user: "bob", path: (n) => `${core}/namespaces/team-a/pods/${n}`, expected: "user-sar-denied" },
  { user: "carol", path: (n) => `${core}/namespaces/team-a/secrets/${n}`, expected: "allowed" },
  { user: "carol", path: (n) => `${cert}/namespaces/team-a/certificates/${n}`, expected: "user-sar-denied" },
  { user: "dave", path: (n) => `${cert}/namespaces/team-a/certificates/${n}`, expected: "can-view-denied" },
];

/** Distinct object names per template: at 150 checks/s, about half the reviews miss a 1 s cache. */
const NAMES = 40;

export function randomRequest(random: () => number = Math.random): ChaosRequest {
  const template = TEMPLATES[Math.floor(random() * TEMPLATES.length)]!;
  const name = `obj-${Math.floor(random() * NAMES)}`;
  return { user: template.user, path: template.path(name), expected: template.expected };
}

/** What an answer was: the reason code of a denial, "allowed", or how the call failed. */
export type AnswerKind = Expected | "dependency-unavailable" | "timeout" | "grpc-error" | `other:${string}`;

/** An allow the oracle forbids is the one outcome the suite exists to rule out. */
export const isForbiddenAllow = (expected: Expected, kind: AnswerKind): boolean => kind === "allowed" && expected !== "allowed";

/** Correct: exactly what the world says. A 503 is fail-closed but not yet recovered. */
export const isCorrect = (expected: Expected, kind: AnswerKind): boolean => kind === expected;
