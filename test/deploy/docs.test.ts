/**
 * The operator documentation covers what the code has: every configuration key, every reason
 * code, every metric.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { normalize, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { REASON_CODES, REASONS } from "../../src/authz/reasons.ts";
import { configJsonSchema } from "../../src/config/json-schema.ts";
import { LIVE_KEYS } from "../../src/server/reload.ts";
import { cli } from "../cli/run.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const read = (file: string) => readFileSync(resolve(ROOT, file), "utf8");

type Schema = { properties?: Record<string, Schema>; items?: Schema; anyOf?: Schema[]; oneOf?: Schema[]; type?: string; default?: unknown };

/** Every key of the configuration file as `a.b`, `a[].b`; a record's own keys are data, not configuration. */
function keys(schema: Schema, path = ""): string[] {
  const out: string[] = [];
  for (const variant of [...(schema.anyOf ?? []), ...(schema.oneOf ?? [])]) out.push(...keys(variant, path));
  if (schema.items !== undefined) out.push(...keys(schema.items, `${path}[]`));
  for (const [name, child] of Object.entries(schema.properties ?? {})) {
    const key = path === "" ? name : `${path}.${name}`;
    out.push(key, ...keys(child, key));
  }
  return [...new Set(out)];
}

describe("docs/configuration.md", () => {
  const doc = read("docs/configuration.md");
  const all = keys(configJsonSchema() as Schema);

  it("knows the schema (sanity: the walk finds nested, array and optional keys)", () => {
    expect(all).toEqual(expect.arrayContaining(["listen.grpc", "tokens.secrets[].env", "envoy.clusters[].serviceDomain", "envoy.origins.pluginProxy"]));
  });

  it.each(all)("documents `%s`", (key) => {
    expect(doc).toContain(`\`${key}\``);
  });
});

/** Every key the schema gives a default, with that default. */
function defaults(schema: Schema, path = ""): Map<string, unknown> {
  const out = new Map<string, unknown>();
  if (path !== "" && "default" in schema) out.set(path, schema.default);
  for (const variant of [...(schema.anyOf ?? []), ...(schema.oneOf ?? [])]) for (const [k, v] of defaults(variant, path)) out.set(k, v);
  if (schema.items !== undefined) for (const [k, v] of defaults(schema.items, `${path}[]`)) out.set(k, v);
  for (const [name, child] of Object.entries(schema.properties ?? {})) for (const [k, v] of defaults(child, path === "" ? name : `${path}.${name}`)) out.set(k, v);
  return out;
}

/** The table rows of docs/configuration.md whose default cell is one literal: `| \`key\` | \`literal\` | …`. */
export function statedDefaults(doc: string): [string, string][] {
  return [...doc.matchAll(/^\| `([\w.[\]]+)` \| `([^`]+)` \|/gm)].map((m) => [m[1]!, m[2]!]);
}

describe("docs/configuration.md's defaults", () => {
  const doc = read("docs/configuration.md");
  const all = keys(configJsonSchema() as Schema);
  const schemaDefaults = defaults(configJsonSchema() as Schema);
  const stated = statedDefaults(doc);

  it("finds the table's literal defaults", () => {
    expect(stated).toEqual(expect.arrayContaining([["kube.watch.inactivityMs", "90000"], ["admin.explain", "false"]]));
  });

  // A literal is JSON, a bare string, or (with no default in the schema) a key it is derived from: `check.timeoutMs + 200`.
  it.each(stated)("`%s` defaults to `%s`, as the schema says", (key, literal) => {
    if (!schemaDefaults.has(key)) {
      expect(all, `${key}: no default in the schema, and \`${literal}\` names no key`).toContain(literal.split(" ")[0]);
      return;
    }
    let stated: unknown = literal;
    try {
      stated = JSON.parse(literal);
    } catch {}
    expect(stated).toEqual(schemaDefaults.get(key));
  });
});

describe("docs/operations.md", () => {
  const doc = read("docs/operations.md");
  const troubleshooting = doc.slice(doc.indexOf("## Troubleshooting"));

  it.each(REASON_CODES)("has a troubleshooting row for `%s` with its status", (code) => {
    expect(troubleshooting).toMatch(new RegExp(`^\\| \`${code}\` \\| ${REASONS[code].http} \\| [^|]+ \\| [^|]+ \\|$`, "m"));
  });

  const metrics = ["src/server/prometheus.ts", "src/server/reload.ts"].flatMap((f) => [...read(f).matchAll(/name: "(portcullis_[a-z_]+)"/g)].map((m) => m[1]!));
  it("finds the metrics the server registers", () => {
    expect(metrics.length).toBeGreaterThan(5);
  });
  it.each(metrics)("lists the metric %s", (metric) => {
    expect(doc).toContain(`| \`${metric}\` |`);
  });

  // The other way: a metric a page or an alert names is one the server registers (a histogram's
  // series included), or the field of Envoy's access log that carries the reason.
  const accessLogFields = [...read("src/deploy/envoy-config.ts").matchAll(/^\s+(portcullis_[a-z_]+): "%/gm)].map((m) => m[1]!);
  it("finds the access log's reason field", () => {
    expect(accessLogFields).toEqual(["portcullis_reason"]);
  });
  it.each(["docs/operations.md", "docs/configuration.md", "README.md", "SECURITY.md", "deploy/k8s/monitoring/prometheusrule.yaml", "deploy/k8s/monitoring/dashboard.json"])("%s names only registered metrics", (page) => {
    const named = [...new Set([...read(page).matchAll(/\bportcullis_[a-z_]+/g)].map((m) => m[0]))];
    expect(named.filter((name) => ![...metrics, ...accessLogFields].includes(name.replace(/_(bucket|sum|count)$/, "")))).toEqual([]);
  });

  it("lists every audit line field", () => {
    const fields = [...read("src/audit/plugin-request.ts").matchAll(/^\s+readonly ([a-z_]+): /gm)].map((m) => m[1]!);
    expect(fields).toContain("pinned_definition_hash");
    const audit = doc.slice(doc.indexOf("## The audit line"), doc.indexOf("## Asking portcullis"));
    for (const field of fields) expect(audit).toContain(`\`${field}\``);
  });
});

/** The pages a newcomer reads end to end (issue 53): what they name must be there. */
const PAGES = ["README.md", "docs/configuration.md", "docs/operations.md", "docs/deployment.md", "SECURITY.md", "ARCHITECTURE.md", "bench/README.md", "deploy/helm/portcullis/values.yaml"];

/** Repository paths a page names: a relative link, or a word starting with a top-level folder (`kubectl exec deploy/NAME` is a Deployment). */
export function namedPaths(page: string, text: string): string[] {
  const dir = page.includes("/") && page.endsWith(".md") ? page.slice(0, page.lastIndexOf("/") + 1) : "";
  const links = [...text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)].map((m) => m[1]!).filter((l) => !/^[a-z]+:/.test(l)).map((l) => `${dir}${l}`);
  const words = [...text.matchAll(/(?<![\w/.~-])((?:src|test|deploy|docs|scripts|bench|protos)\/[\w./{}*<>-]*[\w/])/g)]
    .filter((m) => !/exec $/.test(text.slice(0, m.index)))
    .map((m) => m[1]!)
    .filter((p) => !/[{}*<>]/.test(p));
  return [...new Set([...links, ...words].map((p) => normalize(p).replace(/\/$/, "")))];
}

describe.each(PAGES)("%s names only files that exist", (page) => {
  it.each(namedPaths(page, read(page)))("%s", (path) => {
    expect(existsSync(resolve(ROOT, path))).toBe(true);
  });
});

describe("namedPaths", () => {
  it("finds backticked paths, bare paths and relative links, and skips kubectl's deploy/NAME", () => {
    const text = "see `src/a.ts`, bench/run.ts and [x](../SECURITY.md#y), [web](https://e.x), `kubectl exec deploy/portcullis -- portcullis`";
    expect(namedPaths("docs/x.md", text).sort()).toEqual(["SECURITY.md", "bench/run.ts", "src/a.ts"]);
  });
});

/**
 * Every command line in a page's code (`portcullis …` at the start of a line or span or after `-- `,
 * `npm start -- …`, `node src/cli/main.ts …`): its command and flags, with the line it sits on.
 */
export function namedCommands(text: string): { command: string; flags: string[]; line: string }[] {
  const code = [...text.matchAll(/```[^\n]*\n([\s\S]*?)```|`([^`\n]+)`/g)].map((m) => m[1] ?? m[2]!);
  const calls = code.flatMap((c) => [...c.matchAll(/(?:^|-- |&& )(?:portcullis|npm start --|node src\/cli\/main\.ts) (.*)$/gm)].map((m) => m[1]!));
  return calls.map((line) => {
    const words = line.replace(/\s+#.*$/, "").trim().split(/\s+/);
    const command = words[0]!.startsWith("-") ? "serve" : words[0]!;
    return { command, flags: words.filter((w) => /^--[a-z]/.test(w)).map((w) => w.replace(/=.*$/, "")), line };
  });
}

/** Commands a page may still name, in a sentence that says they are gone. */
const GONE = ["gateway-config"];

it.each(PAGES)("%s names only commands and flags the CLI has", async (page) => {
  const text = read(page);
  // A command is a lower-case word the usage lists, or any hyphenated one (a removed `gateway-config` must fail).
  const usage = (await cli(["--help"])).stdout;
  const calls = namedCommands(text).filter(({ command }) => command === "serve" || usage.includes(`portcullis ${command} `) || /^[a-z]+-[a-z-]+$/.test(command));
  const helps = new Map<string, string>();
  for (const command of new Set(calls.map((c) => c.command))) {
    helps.set(command, (await cli(command === "serve" ? ["--config", "--help"] : [command, "--help"])).stdout);
  }
  const wrong: string[] = [];
  for (const { command, flags, line } of calls) {
    if (GONE.includes(command)) {
      if (!text.split("\n").some((l) => l.includes(` ${line}`) && /\bgone\b/.test(l))) wrong.push(`${command} named as if it were there`);
      continue;
    }
    const help = helps.get(command) ?? "";
    if (!/^usage: portcullis /.test(help)) wrong.push(`portcullis ${command}: no such command`);
    for (const flag of flags) if (!new RegExp(`${flag}\\b`).test(help)) wrong.push(`portcullis ${command} ${flag}: no such flag`);
  }
  expect(wrong).toEqual([]);
}, 120_000);

describe("namedCommands", () => {
  it("reads command lines from code, not from prose or log messages", () => {
    const text = "run `portcullis check --server X --json` or\n```sh\nnpm start -- envoy-config --config F > e.yaml  # note --x\nkubectl exec deploy/portcullis -- portcullis can-i --list\n```\nthe line `portcullis failed to start` and portcullis answers";
    expect(namedCommands(text).map(({ command, flags }) => [command, flags])).toEqual([
      ["check", ["--server", "--json"]],
      ["envoy-config", ["--config"]],
      ["can-i", ["--list"]],
      ["failed", []],
    ]);
  });
});

describe("bench/README.md", () => {
  const table = read("bench/README.md").split("| file | what it is |")[1]!;
  const files = (dir: string): string[] =>
    readdirSync(resolve(ROOT, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(`${dir}/${e.name}`) : [`${dir}/${e.name}`.slice("bench/".length)]));
  // What the runs write (results.json, the charts) and the page itself are not files to explain.
  const sources = files("bench").filter((f) => /\.(ts|sh|rego)$/.test(f) || f === "FINDINGS.md");
  it.each(sources)("its file table explains %s", (file) => {
    expect(table).toContain(`\`${file}\``);
  });
});

describe("a status beside a reason code is the code's", () => {
  const pairs = PAGES.flatMap((page) => [...new Set([...read(page).matchAll(/\b(\d{3}) `([a-z][a-z-]+)`/g)].map((m) => `${m[1]} ${m[2]}`))].map((pair) => [page, pair] as const));
  it("finds them", () => {
    expect(pairs).toContainEqual(["README.md", "503 dependency-unavailable"]);
  });
  it.each(pairs)("%s: %s", (_, pair) => {
    const [status, code] = pair.split(" ") as [string, string];
    expect(REASON_CODES, `${code} is a reason code`).toContain(code);
    expect(String(REASONS[code as (typeof REASON_CODES)[number]].http)).toBe(status);
  });
});

describe("the alerts deploy/k8s/monitoring ships", () => {
  const alerts = [...read("deploy/k8s/monitoring/prometheusrule.yaml").matchAll(/^\s*- alert: (\w+)$/gm)].map((m) => m[1]!);
  it("finds them", () => {
    expect(alerts).toContain("PortcullisIndexUnsynced");
  });
  it.each(alerts)("docs/operations.md explains %s", (alert) => {
    expect(read("docs/operations.md")).toContain(alert);
  });
  // The other way: an alert a page names is one that is shipped.
  const named = PAGES.flatMap((page) => [...new Set([...read(page).matchAll(/\bPortcullis[A-Z]\w+/g)].map((m) => m[0]))].map((alert) => [page, alert] as const));
  it.each(named)("%s names %s, which is shipped", (_, alert) => {
    expect(alerts).toContain(alert);
  });
});

describe("docs/configuration.md's reload section", () => {
  const doc = read("docs/configuration.md");
  const live = doc.slice(doc.indexOf("- **Applied live**"), doc.indexOf("- **Needs a restart**"));
  const restart = doc.slice(doc.indexOf("- **Needs a restart**"), doc.indexOf("A SIGHUP during a reload"));
  it.each(LIVE_KEYS)("applies `%s` live, as reload.ts does", (key) => {
    expect(live).toContain(`\`${key}\``);
  });
  // Every other top-level key needs a restart, named whole or by its keys (`openfga.*`, `tokens.mode`).
  const restartKeys = Object.keys((configJsonSchema() as Schema).properties!).filter((key) => !LIVE_KEYS.includes(key));
  it.each(restartKeys)("names `%s` as needing a restart", (key) => {
    expect(restart).toMatch(new RegExp(`\`${key}(\\.[\\w*]+)?\``));
  });
});

describe("docs/operations.md's log messages", () => {
  const files = (dir: string): string[] =>
    readdirSync(resolve(ROOT, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(`${dir}/${e.name}`) : [`${dir}/${e.name}`]));
  const source = files("src")
    .filter((f) => f.endsWith(".ts"))
    .map(read)
    .join("\n");
  const messages = [...read("docs/operations.md").matchAll(/^\| `([^`]+)` \| (?:fatal|error|warn|info|debug|trace) \|/gm)].map((m) => m[1]!);
  it("finds the logs table", () => {
    expect(messages).toContain("portcullis listening");
  });
  // `…` and `<field>` stand for what the line fills in; the words around them are the code's.
  it.each(messages)("`%s` is a message the code logs", (message) => {
    for (const words of message.split(/…|<\w+>/).map((w) => w.trim()).filter((w) => w.length > 0)) expect(source.includes(words), words).toBe(true);
  });
});

describe("commands run inside the portcullis Pod", () => {
  // The image runs `node … src/cli/main.ts` from /app under tini; `portcullis` is not on its PATH.
  const dockerfile = read("Dockerfile");
  it("the image's ENTRYPOINT is node on src/cli/main.ts, and nothing links a portcullis executable", () => {
    expect(dockerfile).toMatch(/^ENTRYPOINT \["tini", "--", "node", .*"src\/cli\/main\.ts"\]$/m);
    expect(dockerfile).not.toMatch(/\/bin\/portcullis|npm (link|install -g)/);
  });
  const execs = PAGES.flatMap((page) => [...read(page).matchAll(/kubectl exec \S+ -- (\S+)(?:\s+(\S+))?/g)].map((m) => [page, m[1]!, m[2] ?? ""] as const));
  it("finds them", () => {
    expect(execs.length).toBeGreaterThan(0);
  });
  it.each(execs)("%s: kubectl exec … -- %s %s", (_, executable, first) => {
    expect(["node", "sh"]).toContain(executable);
    if (executable === "node") expect(first).toBe("src/cli/main.ts");
  });
});
