/**
 * docs/configuration.md's Konfidence tables, written from the code's defaults (permissions.ts) so
 * the two cannot drift: the permission matrix (role → resource kind → verbs) and the route table
 * with, per endpoint, which default role may call it. test/konfidence-model/permission-tables.test.ts
 * checks the document holds exactly this; `node scripts/konfidence-tables.ts` rewrites it.
 */
import { compilePermissions, DEFAULT_PERMISSIONS, DEFAULT_ROUTES, RESOURCE_KINDS, type RouteSpec, VERBS } from "./permissions.ts";

export const BEGIN_MARKER = "<!-- konfidence-defaults: generated from src/konfidence-model/permissions.ts (scripts/konfidence-tables.ts); do not edit by hand -->";
export const END_MARKER = "<!-- /konfidence-defaults -->";

export function renderKonfidenceDefaults(): string {
  const roles = Object.keys(DEFAULT_PERMISSIONS);
  const permissions = compilePermissions(DEFAULT_PERMISSIONS);
  const matrix = [
    `| resource kind | ${roles.join(" | ")} |`,
    `| --- | ${roles.map(() => "---").join(" | ")} |`,
    ...RESOURCE_KINDS.map((kind) => {
      const cells = roles.map((role) => {
        const verbs = VERBS.filter((verb) => permissions.allows([role], kind, verb));
        return verbs.length === 0 ? "—" : verbs.join(", ");
      });
      return `| \`${kind}\` | ${cells.join(" | ")} |`;
    }),
  ];
  const routes = [
    `| method | path | needs | ${roles.join(" | ")} |`,
    `| --- | --- | --- | ${roles.map(() => "---").join(" | ")} |`,
    ...DEFAULT_ROUTES.map((route) => `| ${route.methods.join(", ")} | \`${route.path}\` | ${needs(route)} | ${roles.map((role) => mayCall(route, role, permissions)).join(" | ")} |`),
  ];
  return [
    BEGIN_MARKER,
    "",
    "The default permission matrix (`konfidence.permissions` when absent): the verbs each role has on each resource kind.",
    "",
    ...matrix,
    "",
    "The default route table (`konfidence.routes` when absent) and, per endpoint, whether each default role may call it",
    "(✓, or — for 403 `role-denied`). HEAD is read as GET; a path not listed is 404 `not-found`, a listed path with another",
    "method 405, both before any credential is read. `public` needs no credential; `authenticated`, any valid identity (its",
    "roles are not consulted).",
    "",
    ...routes,
    "",
    END_MARKER,
  ].join("\n");
}

function needs(route: RouteSpec): string {
  return "access" in route ? `${route.access}` : `\`${route.kind}\` ${route.verb}`;
}

function mayCall(route: RouteSpec, role: string, permissions: ReturnType<typeof compilePermissions>): string {
  if ("access" in route) return route.access === "public" ? "anyone" : "any identity";
  return permissions.allows([role], route.kind, route.verb) ? "✓" : "—";
}

/** The document with its generated section replaced by the current render. */
export function withKonfidenceDefaults(doc: string): string {
  const begin = doc.indexOf(BEGIN_MARKER);
  const end = doc.indexOf(END_MARKER);
  if (begin === -1 || end === -1 || end < begin) throw new Error("docs/configuration.md has no konfidence-defaults section");
  return `${doc.slice(0, begin)}${renderKonfidenceDefaults()}${doc.slice(end + END_MARKER.length)}`;
}
