/**
 * docs/configuration.md writes out the default Konfidence permission matrix and route table
 * (issue 13): the section is exactly what the code renders, and — read back from the document —
 * each row agrees with how the compiled route table and matrix decide a request to that endpoint.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { BEGIN_MARKER, END_MARKER, renderKonfidenceDefaults, withKonfidenceDefaults } from "../../src/konfidence-model/permission-tables.ts";
import { compilePermissions, compileRoutes, DEFAULT_PERMISSIONS, DEFAULT_ROUTES } from "../../src/konfidence-model/permissions.ts";

const doc = readFileSync(resolve(import.meta.dirname, "../../docs/configuration.md"), "utf8");
const section = doc.slice(doc.indexOf(BEGIN_MARKER), doc.indexOf(END_MARKER) + END_MARKER.length);

describe("docs/configuration.md's Konfidence defaults", () => {
  it("are exactly what src/konfidence-model/permissions.ts renders (regenerate: npx node scripts/konfidence-tables.ts)", () => {
    expect(section).toBe(renderKonfidenceDefaults());
    expect(withKonfidenceDefaults(doc)).toBe(doc);
  });

  const roles = Object.keys(DEFAULT_PERMISSIONS);
  const routeRows = section
    .split("\n")
    .filter((line) => /^\| (GET|POST|PUT|PATCH|DELETE)/.test(line))
    .map((line) => line.split("|").slice(1, -1).map((cell) => cell.trim()));

  it("list every default route once", () => {
    expect(routeRows.length).toBe(DEFAULT_ROUTES.length);
  });

  const routes = compileRoutes(DEFAULT_ROUTES);
  const permissions = compilePermissions(DEFAULT_PERMISSIONS);
  it.each(routeRows.flatMap(([methods, path, , ...cells]) => methods!.split(", ").map((method) => ({ method, path: path!.replaceAll("`", ""), cells }))))(
    "$method $path: the row says what a request there gets",
    ({ method, path, cells }) => {
      // A concrete request to the template: each parameter a plausible value.
      const match = routes.match(method, path.replace(/\{[A-Za-z]+\}/g, "p-1"));
      expect(match.kind).not.toMatch(/not-found|method-not-allowed|malformed/);
      roles.forEach((role, i) => {
        const expected = match.kind === "public" ? "anyone" : match.kind === "authenticated" ? "any identity" : match.kind === "project" && permissions.allows([role], match.resource, match.verb) ? "✓" : "—";
        expect(cells[i], `${role}`).toBe(expected);
      });
    },
  );
});
