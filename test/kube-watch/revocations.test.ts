/**
 * The deny-list's pure part: reading a Revocation object (the CRD's validation, again, for a
 * cluster where the CRD was installed without it) and matching a request against the entries.
 */
import { describe, expect, it } from "vitest";
import { covers, type RevocationSubject, type RevocationTarget, revocationOf, RevocationSet } from "../../src/kube-watch/revocations.ts";
import { revocationName, revocationObject, targetOf } from "../../src/cli/revoke.ts";
import { ids, PINNED_HASH } from "../support/tokens.ts";

const OTHER_HASH = `sha256:${"cd".repeat(32)}`;

describe("revocationOf", () => {
  it.each([
    { name: "installation", spec: { reason: "r", installation: { id: ids.installation } }, expected: { scope: "installation", installationId: ids.installation } },
    { name: "user", spec: { reason: "r", user: { id: ids.user } }, expected: { scope: "user", userId: ids.user } },
    { name: "plugin, every version", spec: { plugin: { name: "cert-manager" } }, expected: { scope: "plugin", pluginName: "cert-manager" } },
    {
      name: "plugin version and definition",
      spec: { plugin: { name: "cert-manager", version: "0.9.0", definitionHash: PINNED_HASH } },
      expected: { scope: "plugin", pluginName: "cert-manager", pluginVersion: "0.9.0", definitionHash: PINNED_HASH },
    },
  ])("reads $name", ({ spec, expected }) => {
    expect(revocationOf({ metadata: { name: "x" }, spec })).toEqual({ name: "x", target: expected });
  });

  it.each([
    { name: "no name", obj: { spec: { user: { id: ids.user } } } },
    { name: "no spec", obj: { metadata: { name: "x" } } },
    { name: "no target", obj: { metadata: { name: "x" }, spec: {} } },
    { name: "two targets", obj: { metadata: { name: "x" }, spec: { user: { id: ids.user }, installation: { id: ids.installation } } } },
    { name: "installation id not a UUID", obj: { metadata: { name: "x" }, spec: { installation: { id: "cert-manager" } } } },
    { name: "installation id upper case", obj: { metadata: { name: "x" }, spec: { installation: { id: ids.installation.toUpperCase() } } } },
    { name: "installation id missing", obj: { metadata: { name: "x" }, spec: { installation: {} } } },
    { name: "user id a number", obj: { metadata: { name: "x" }, spec: { user: { id: 7 } } } },
    { name: "plugin name not a DNS label", obj: { metadata: { name: "x" }, spec: { plugin: { name: "Cert_Manager" } } } },
    { name: "plugin version with a newline", obj: { metadata: { name: "x" }, spec: { plugin: { name: "a", version: "1.0\n" } } } },
    { name: "definition hash that pins nothing", obj: { metadata: { name: "x" }, spec: { plugin: { name: "a", definitionHash: "sha256:unknown" } } } },
    { name: "definition hash empty", obj: { metadata: { name: "x" }, spec: { plugin: { name: "a", definitionHash: "" } } } },
  ])("refuses $name", ({ obj }) => {
    expect(revocationOf(obj as never)).toHaveProperty("invalid");
  });
});

describe("covers", () => {
  const subject: RevocationSubject = { installationId: ids.installation, pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: PINNED_HASH, userId: ids.user };
  const cases: Array<{ name: string; target: RevocationTarget; subject?: RevocationSubject; expected: boolean }> = [
    { name: "the installation", target: { scope: "installation", installationId: ids.installation }, expected: true },
    { name: "another installation", target: { scope: "installation", installationId: ids.otherInstallation }, expected: false },
    { name: "the user", target: { scope: "user", userId: ids.user }, expected: true },
    { name: "another user", target: { scope: "user", userId: ids.otherUser }, expected: false },
    { name: "a user entry, no user asked (a mint)", target: { scope: "user", userId: ids.user }, subject: { ...subject, userId: undefined } as RevocationSubject, expected: false },
    { name: "the plugin, every version", target: { scope: "plugin", pluginName: "cert-manager" }, expected: true },
    { name: "another plugin", target: { scope: "plugin", pluginName: "cert-manager-ui" }, expected: false },
    { name: "the plugin's version", target: { scope: "plugin", pluginName: "cert-manager", pluginVersion: "1.4.0" }, expected: true },
    { name: "another version", target: { scope: "plugin", pluginName: "cert-manager", pluginVersion: "1.4.1" }, expected: false },
    { name: "a version differing in case", target: { scope: "plugin", pluginName: "cert-manager", pluginVersion: "1.4.0-RC" }, subject: { ...subject, pluginVersion: "1.4.0-rc" }, expected: false },
    { name: "the definition", target: { scope: "plugin", pluginName: "cert-manager", definitionHash: PINNED_HASH }, expected: true },
    { name: "another definition", target: { scope: "plugin", pluginName: "cert-manager", definitionHash: OTHER_HASH }, expected: false },
    { name: "version and definition, both match", target: { scope: "plugin", pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: PINNED_HASH }, expected: true },
    { name: "version matches, definition does not", target: { scope: "plugin", pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: OTHER_HASH }, expected: false },
  ];
  it.each(cases)("$name → $expected", ({ target, subject: s, expected }) => {
    expect(covers(target, s ?? subject)).toBe(expected);
  });
});

describe("RevocationSet", () => {
  it("matches while an entry is in, not after it is removed or cleared; a put under the same name replaces", () => {
    const set = new RevocationSet();
    const subject: RevocationSubject = { installationId: ids.installation, pluginName: "a", pluginVersion: "1", definitionHash: PINNED_HASH, userId: ids.user };
    expect(set.match(subject)).toBeUndefined();
    set.put({ name: "x", target: { scope: "user", userId: ids.user } });
    expect(set.match(subject)?.name).toBe("x");
    set.put({ name: "x", target: { scope: "user", userId: ids.otherUser } });
    expect(set.match(subject)).toBeUndefined();
    set.put({ name: "y", target: { scope: "installation", installationId: ids.installation } });
    set.remove("y");
    expect(set.match(subject)).toBeUndefined();
    set.put({ name: "z", target: { scope: "plugin", pluginName: "a" } });
    set.clear();
    expect(set.size).toBe(0);
    expect(set.match(subject)).toBeUndefined();
  });
});

describe("portcullis revoke: flags → object", () => {
  it.each([
    { name: "installation", flags: { installation: ids.installation }, target: { scope: "installation", installationId: ids.installation }, object: `installation-${ids.installation}` },
    { name: "user", flags: { user: ids.user }, target: { scope: "user", userId: ids.user }, object: `user-${ids.user}` },
    { name: "plugin", flags: { plugin: "cert-manager" }, target: { scope: "plugin", pluginName: "cert-manager" }, object: /^plugin-cert-manager-[0-9a-f]{10}$/ },
  ])("$name", ({ flags, target, object }) => {
    expect(targetOf(flags)).toEqual(target);
    expect(revocationName(targetOf(flags))).toMatch(object);
    // What the CLI writes is read back as the same entry.
    expect(revocationOf(revocationObject(targetOf(flags), "INC-1") as never)).toEqual({ name: revocationName(targetOf(flags)), target });
  });

  it("gives different versions (that a name would fold together) different names", () => {
    const names = ["1.0+a", "1.0_a", "1.0-a", undefined].map((v) => revocationName({ scope: "plugin", pluginName: "p", ...(v === undefined ? {} : { pluginVersion: v }) }));
    expect(new Set(names).size).toBe(4);
    for (const n of names) expect(n).toMatch(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
  });

  it.each([
    { name: "no target", flags: {} },
    { name: "two targets", flags: { user: ids.user, installation: ids.installation } },
    { name: "a version without a plugin", flags: { "plugin-version": "1.0" } },
    { name: "an installation name instead of its uid", flags: { installation: "cert-manager" } },
  ])("refuses $name", ({ flags }) => {
    expect(() => targetOf(flags)).toThrow();
  });
});
