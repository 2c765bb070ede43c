/**
 * What each role may do (ADR-0028 "Authorization granularity"): a role grants whole resource kinds
 * and verbs on them, never single objects or fields. Two tables, both compiled at start:
 *  - the route table: each Konfidence API endpoint (method + path template) → the resource kind and
 *    verb it touches, or `authenticated` (any caller with a valid credential) or `public`;
 *  - the permission matrix: role → resource kind → verbs. Defaults follow the ADR's role intent:
 *    admin everything; pm the delivery process (promotion flows, stage configuration, approvals)
 *    but not roleBindings; dev read-only observability.
 * An endpoint not in the route table does not exist for portcullis: 404 `not-found` (a known path
 * with another method: 405 with `allow`), before any credential is looked at — the API's endpoints
 * are public knowledge, its projects are not.
 */

export const RESOURCE_KINDS = [
  "project",
  "roleBindings",
  "landscapes",
  "stages",
  "vectorTemplates",
  "vectorPromotionConfigs",
  "vectorPromotions",
  "promotionApprovals",
  "deployments",
  "logs",
  "artifacts",
] as const;
export type ResourceKind = (typeof RESOURCE_KINDS)[number];

export const VERBS = ["read", "create", "update", "delete"] as const;
export type Verb = (typeof VERBS)[number];

export const ROUTE_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const;
export type RouteMethod = (typeof ROUTE_METHODS)[number];

export type PermissionMatrix = Readonly<Record<string, Readonly<Partial<Record<ResourceKind, readonly Verb[]>>>>>;

const READ: readonly Verb[] = ["read"];
const ALL: readonly Verb[] = VERBS;

export const DEFAULT_PERMISSIONS: PermissionMatrix = {
  admin: Object.fromEntries(RESOURCE_KINDS.map((kind) => [kind, ALL])),
  pm: {
    project: READ,
    landscapes: READ,
    stages: ["read", "update"],
    vectorTemplates: READ,
    vectorPromotionConfigs: ALL,
    vectorPromotions: ALL,
    promotionApprovals: ["read", "create"],
    deployments: READ,
    logs: READ,
    artifacts: READ,
  },
  dev: {
    project: READ,
    landscapes: READ,
    stages: READ,
    vectorTemplates: READ,
    vectorPromotionConfigs: READ,
    vectorPromotions: READ,
    promotionApprovals: READ,
    deployments: READ,
    logs: READ,
    artifacts: READ,
  },
};

export interface Permissions {
  /** True when any of the roles grants `verb` on `kind`. */
  allows(roles: Iterable<string>, kind: ResourceKind, verb: Verb): boolean;
}

export function compilePermissions(matrix: PermissionMatrix): Permissions {
  const granted = new Map<string, ReadonlySet<string>>();
  for (const [role, kinds] of Object.entries(matrix)) {
    granted.set(role, new Set(Object.entries(kinds).flatMap(([kind, verbs]) => (verbs ?? []).map((verb) => `${kind}:${verb}`))));
  }
  return {
    allows(roles, kind, verb) {
      const permission = `${kind}:${verb}`;
      for (const role of roles) if (granted.get(role)?.has(permission)) return true;
      return false;
    },
  };
}

export type RouteAccess = "public" | "authenticated";

/** One endpoint. `path` is a template: literal segments and `{name}` parameters, one segment each. */
export type RouteSpec =
  | { readonly methods: readonly RouteMethod[]; readonly path: string; readonly access: RouteAccess }
  | { readonly methods: readonly RouteMethod[]; readonly path: string; readonly kind: ResourceKind; readonly verb: Verb };

/** Every project-scoped endpoint starts here; the parameter is the Project's metadata.name. */
export const PROJECT_PREFIX = "/api/v1/projects/{projectId}";

/** GET the collection and one item (read), POST the collection (create), PUT/PATCH (update) and DELETE one item. */
function collection(path: string, item: string, kind: ResourceKind): RouteSpec[] {
  return [
    { methods: ["GET"], path, kind, verb: "read" },
    { methods: ["POST"], path, kind, verb: "create" },
    { methods: ["GET"], path: `${path}/${item}`, kind, verb: "read" },
    { methods: ["PUT", "PATCH"], path: `${path}/${item}`, kind, verb: "update" },
    { methods: ["DELETE"], path: `${path}/${item}`, kind, verb: "delete" },
  ];
}

function readOnly(kind: ResourceKind, ...paths: string[]): RouteSpec[] {
  return paths.map((path) => ({ methods: ["GET"], path, kind, verb: "read" }));
}

const P = PROJECT_PREFIX;

export const DEFAULT_ROUTES: readonly RouteSpec[] = [
  // The login flow runs before there is a credential.
  { methods: ["GET"], path: "/api/v1/login", access: "public" },
  { methods: ["GET"], path: "/api/v1/auth/callback", access: "public" },
  { methods: ["POST"], path: "/api/v1/exchange", access: "public" },
  // Any authenticated caller; the list is filtered upstream by the caller's roles.
  { methods: ["GET"], path: "/api/v1/projects", access: "authenticated" },
  { methods: ["GET"], path: "/api/v1/identity", access: "authenticated" },
  { methods: ["POST"], path: "/api/v1/logout", access: "authenticated" },

  { methods: ["GET"], path: P, kind: "project", verb: "read" },
  { methods: ["PUT", "PATCH"], path: P, kind: "project", verb: "update" },
  { methods: ["DELETE"], path: P, kind: "project", verb: "delete" },
  { methods: ["GET"], path: `${P}/roleBindings`, kind: "roleBindings", verb: "read" },
  { methods: ["PUT", "PATCH"], path: `${P}/roleBindings`, kind: "roleBindings", verb: "update" },
  { methods: ["GET"], path: `${P}/roleBindings/{role}`, kind: "roleBindings", verb: "read" },
  { methods: ["PUT", "PATCH"], path: `${P}/roleBindings/{role}`, kind: "roleBindings", verb: "update" },
  { methods: ["DELETE"], path: `${P}/roleBindings/{role}`, kind: "roleBindings", verb: "delete" },
  ...collection(`${P}/landscapes`, "{landscapeId}", "landscapes"),
  ...collection(`${P}/stages`, "{stageId}", "stages"),
  ...collection(`${P}/vectorTemplates`, "{vectorTemplateId}", "vectorTemplates"),
  ...collection(`${P}/vectorPromotionConfigs`, "{vectorPromotionConfigId}", "vectorPromotionConfigs"),
  ...collection(`${P}/vectorPromotions`, "{vectorPromotionId}", "vectorPromotions"),
  { methods: ["POST"], path: `${P}/vectorPromotions/{vectorPromotionId}/approve`, kind: "promotionApprovals", verb: "create" },
  ...readOnly(
    "deployments",
    `${P}/status`,
    `${P}/stages/{stageId}/status`,
    `${P}/vectorDeployments`,
    `${P}/vectorDeployments/{vectorDeploymentId}`,
    `${P}/vectorDeployments/{vectorDeploymentId}/status`,
  ),
  ...readOnly("logs", `${P}/logs`, `${P}/stages/{stageId}/logs`, `${P}/vectorDeployments/{vectorDeploymentId}/logs`),
  ...readOnly(
    "artifacts",
    `${P}/artifacts`,
    `${P}/artifacts/{artifactId}`,
    `${P}/artifactDeployments`,
    `${P}/artifactDeployments/{artifactDeploymentId}`,
  ),
];

export type RouteMatch =
  | { readonly kind: "public" }
  | { readonly kind: "authenticated" }
  | { readonly kind: "project"; readonly projectId: string; readonly resource: ResourceKind; readonly verb: Verb }
  | { readonly kind: "not-found" }
  | { readonly kind: "method-not-allowed"; readonly allow: readonly string[] }
  | { readonly kind: "malformed"; readonly detail: string };

export interface RouteTable {
  /** Pure: the endpoint a request reaches. HEAD is read as GET. */
  match(method: string, path: string): RouteMatch;
}

/** Thrown for a route table that cannot be compiled; configuration validation reports its message. */
export class RouteTableError extends Error {
  readonly code = "invalid-route-table";
}

interface CompiledRoute {
  /** A literal segment, or undefined for a parameter. */
  readonly segments: ReadonlyArray<string | undefined>;
  readonly methods: ReadonlySet<string>;
  readonly target: { readonly kind: RouteAccess } | { readonly kind: "project"; readonly resource: ResourceKind; readonly verb: Verb };
}

const LITERAL = /^[A-Za-z0-9._~-]+$/;
const PARAMETER = /^\{[A-Za-z][A-Za-z0-9]*\}$/;
const PROJECT_SEGMENTS = PROJECT_PREFIX.slice(1).split("/");
const PROJECT_ID_INDEX = PROJECT_SEGMENTS.length - 1;

export function compileRoutes(specs: readonly RouteSpec[]): RouteTable {
  const routes = specs.map(compileRoute);
  // More literal segments first, so `stages/{stageId}/status` is not shadowed by a parameter in
  // the same position of another template; equal shapes must not share a method.
  routes.sort((a, b) => compareSpecificity(a.segments, b.segments));
  for (let i = 1; i < routes.length; i++) {
    for (let j = 0; j < i; j++) {
      const a = routes[i]!;
      const b = routes[j]!;
      if (sameShape(a.segments, b.segments) && [...a.methods].some((m) => b.methods.has(m))) {
        throw new RouteTableError(`two routes for ${[...a.methods].find((m) => b.methods.has(m))} ${render(a.segments)}`);
      }
    }
  }
  const byLength = new Map<number, CompiledRoute[]>();
  for (const route of routes) byLength.set(route.segments.length, [...(byLength.get(route.segments.length) ?? []), route]);

  return {
    match(method, path) {
      if (!path.startsWith("/")) return { kind: "not-found" };
      const segments = path.slice(1).split("/");
      if (!segments.every(isPlainSegment)) return { kind: "malformed", detail: "path is not normalized" };
      const wanted = method === "HEAD" ? "GET" : method;
      const allowed = new Set<string>();
      for (const route of byLength.get(segments.length) ?? []) {
        if (!route.segments.every((literal, i) => (literal === undefined ? segments[i] !== "" : literal === segments[i]))) continue;
        if (!route.methods.has(wanted)) {
          for (const m of route.methods) allowed.add(m);
          continue;
        }
        if (route.target.kind !== "project") return { kind: route.target.kind };
        return { kind: "project", projectId: segments[PROJECT_ID_INDEX]!, resource: route.target.resource, verb: route.target.verb };
      }
      if (allowed.size === 0) return { kind: "not-found" };
      if (allowed.has("GET")) allowed.add("HEAD");
      return { kind: "method-not-allowed", allow: [...allowed].sort() };
    },
  };
}

/**
 * Envoy normalizes paths; a segment that still is, or decodes to, a dot segment or something with a
 * slash could make the upstream resolve another endpoint than the one authorized, so it is refused.
 */
function isPlainSegment(segment: string): boolean {
  let decoded: string;
  try {
    decoded = decodeURIComponent(segment);
  } catch {
    return false;
  }
  return decoded !== "." && decoded !== ".." && !decoded.includes("/") && !decoded.includes("\\");
}

function compileRoute(spec: RouteSpec): CompiledRoute {
  if (!spec.path.startsWith("/")) throw new RouteTableError(`route ${spec.path}: must start with /`);
  const raw = spec.path.slice(1).split("/");
  const segments = raw.map((s) => {
    if (PARAMETER.test(s)) return undefined;
    if (LITERAL.test(s)) return s;
    throw new RouteTableError(`route ${spec.path}: segment "${s}" is neither a literal nor a {parameter}`);
  });
  if ("access" in spec) {
    // Anything inside a project is decided by the project's roleBindings, never by `access`.
    const insideProject = raw.length > PROJECT_ID_INDEX && PROJECT_SEGMENTS.slice(0, PROJECT_ID_INDEX).every((s, i) => raw[i] === s);
    if (insideProject) throw new RouteTableError(`route ${spec.path}: a route inside a project needs a kind and a verb`);
    return { segments, methods: new Set(spec.methods), target: { kind: spec.access } };
  }
  const scoped = raw.length > PROJECT_ID_INDEX && PROJECT_SEGMENTS.every((s, i) => raw[i] === s);
  if (!scoped) throw new RouteTableError(`route ${spec.path}: a route with a kind must start with ${PROJECT_PREFIX}`);
  return { segments, methods: new Set(spec.methods), target: { kind: "project", resource: spec.kind, verb: spec.verb } };
}

function compareSpecificity(a: ReadonlyArray<string | undefined>, b: ReadonlyArray<string | undefined>): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const aLiteral = a[i] !== undefined;
    const bLiteral = b[i] !== undefined;
    if (aLiteral !== bLiteral) return aLiteral ? -1 : 1;
  }
  // A consistent order for sort(): answering 0 for a template and a longer one alike up to its end
  // let sort() leave `stages/{stageId}` before `stages/order`, as the routes were listed.
  return a.length - b.length;
}

function sameShape(a: ReadonlyArray<string | undefined>, b: ReadonlyArray<string | undefined>): boolean {
  return a.length === b.length && a.every((s, i) => s === b[i]);
}

function render(segments: ReadonlyArray<string | undefined>): string {
  return `/${segments.map((s) => s ?? "{}").join("/")}`;
}
