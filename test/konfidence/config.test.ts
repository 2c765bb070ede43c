/**
 * The `konfidence` configuration section: defaults, and what validation rejects before the server
 * starts (unknown kinds, verbs, methods and role names; ambiguous routes; bad provider URLs).
 */
import { describe, expect, it } from "vitest";
import { ConfigError, parseConfig } from "../../src/config/load.ts";
import { DEFAULT_PERMISSIONS, DEFAULT_ROUTES } from "../../src/konfidence-model/permissions.ts";
import { providerTrust } from "../../src/server/konfidence-ports.ts";

const BASE = `
tokens: { secrets: [{ env: X }] }
openfga: { apiUrl: "http://openfga:8080", storeId: 01HVMMBCMGZNT3SED4Z17ECXCA }
clusters: [{ id: 0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b, kubeconfig: /k }]
`;
const GITHUB = "https://token.actions.githubusercontent.com/.well-known/openid-configuration";

describe("konfidence configuration", () => {
  it("is optional", () => {
    expect(parseConfig(BASE).konfidence).toBeUndefined();
  });

  it("fills every default from an empty section", () => {
    expect(parseConfig(`${BASE}konfidence: {}`).konfidence).toEqual({
      cluster: {},
      providers: {
        trust: "allowList",
        allowList: [],
        platformAudiences: [],
        timeoutMs: 500,
        maxResponseBytes: 262_144,
        discoveryTtlMs: 3_600_000,
        jwksCooldownMs: 30_000,
        jwksMaxAgeMs: 600_000,
        clockToleranceSeconds: 5,
        verifiedCacheMaxEntries: 20_000,
        failureBackoffInitialMs: 1_000,
        failureBackoffMaxMs: 30_000,
      },
      permissions: DEFAULT_PERMISSIONS,
      routes: DEFAULT_ROUTES,
    });
  });

  it("accepts a full section", () => {
    const config = parseConfig(`${BASE}
konfidence:
  cluster: { clusterId: 0e6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b }
  providers: { trust: any-https, caFile: /etc/ca.pem }
  session: { discoveryUrl: "https://login.example/realms/p/.well-known/openid-configuration", audience: konfidence-ui, cookie: kden-session, userInfo: true }
  permissions: { auditor: { logs: [read] } }
  routes: [{ methods: [GET], path: "/api/v1/projects/{projectId}/logs", kind: logs, verb: read }]
`);
    expect(config.konfidence).toMatchObject({
      session: { groupsClaim: "groups", userInfo: true, userInfoTtlMs: 300_000 },
      permissions: { auditor: { logs: ["read"] } },
    });
  });

  it.each([
    { name: "an unknown resource kind in the matrix", section: "permissions: { admin: { secrets: [read] } }", issue: /konfidence\.permissions\.admin: Unrecognized key: "secrets"/ },
    { name: "an unknown verb in the matrix", section: "permissions: { admin: { logs: [tail] } }", issue: /konfidence\.permissions\.admin\.logs\[0\]/ },
    { name: "a role name that could not travel in a header", section: "permissions: { 'Admins,root': { logs: [read] } }", issue: /konfidence\.permissions/ },
    { name: "an unknown kind in a route", section: "routes: [{ methods: [GET], path: '/api/v1/projects/{projectId}/x', kind: secrets, verb: read }]", issue: /konfidence\.routes\[0\]/ },
    { name: "an unknown method in a route", section: "routes: [{ methods: [TRACE], path: '/api/v1/projects/{projectId}/x', kind: logs, verb: read }]", issue: /konfidence\.routes\[0\]/ },
    { name: "two routes for one endpoint", section: "routes: [{ methods: [GET], path: '/api/v1/projects/{projectId}/x', kind: logs, verb: read }, { methods: [GET], path: '/api/v1/projects/{projectId}/x', kind: stages, verb: read }]", issue: /konfidence\.routes: two routes for GET/ },
    { name: "a public route inside a project", section: "routes: [{ methods: [GET], path: '/api/v1/projects/{projectId}/x', access: public }]", issue: /needs a kind and a verb/ },
    { name: "an allow-listed provider over http", section: "providers: { allowList: ['http://idp.example/.well-known/openid-configuration'] }", issue: /konfidence\.providers\.allowList\[0\]: expected an https URL/ },
    { name: "an unknown trust mode", section: "providers: { trust: any }", issue: /konfidence\.providers\.trust/ },
    { name: "a session with both cookie and header", section: `session: { discoveryUrl: "${GITHUB}", audience: a, cookie: c, header: x-s }`, issue: /expected exactly one of cookie or header/ },
    { name: "a session read from the Authorization header", section: `session: { discoveryUrl: "${GITHUB}", audience: a, header: authorization }`, issue: /konfidence\.session\.header/ },
    { name: "a session without an audience", section: `session: { discoveryUrl: "${GITHUB}", cookie: c }`, issue: /konfidence\.session\.audience/ },
    { name: "a project cluster portcullis has no credentials for", section: "cluster: { clusterId: 1f7a2b3c-4d5e-4f6a-9b0c-1d2e3f4a5b6c }", issue: /konfidence\.cluster\.clusterId: 1f7a2b3c-4d5e-4f6a-9b0c-1d2e3f4a5b6c is not in clusters\[\]/ },
    { name: "a typo", section: "provider: {}", issue: /Unrecognized key: "provider"/ },
  ])("rejects $name", ({ section, issue }) => {
    expect(() => parseConfig(`${BASE}konfidence: { ${section} }`)).toThrow(ConfigError);
    expect(() => parseConfig(`${BASE}konfidence: { ${section} }`)).toThrow(issue);
  });
});

describe("provider trust (ADR-0028 open question 1)", () => {
  const providers = (section: string) => parseConfig(`${BASE}konfidence: { providers: ${section} }`).konfidence!.providers;

  it("allowList trusts exactly the listed discovery URLs, compared normalized", () => {
    const trusts = providerTrust(providers(`{ allowList: ["https://Token.Actions.GithubUserContent.com/.well-known/openid-configuration"] }`));
    expect(trusts(GITHUB)).toBe(true);
    expect(trusts("https://gitlab.example.com/.well-known/openid-configuration")).toBe(false);
  });

  it("allowList is the default, and empty by default: nothing is trusted until the platform lists it", () => {
    expect(providerTrust(providers("{}"))(GITHUB)).toBe(false);
  });

  it("any-https trusts any provider a Project names (subjects already require https)", () => {
    expect(providerTrust(providers("{ trust: any-https }"))("https://anything.example/.well-known/openid-configuration")).toBe(true);
  });
});
