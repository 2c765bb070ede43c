/** Whether an installation may be acted through (FUN-17 §11, FUN-19 §4). Pure table. */
import { describe, expect, it } from "vitest";
import { unusableInstallation } from "../../src/authz/installation.ts";
import type { PluginClaims } from "../../src/tokens/fundament.ts";
import { installation } from "../support/fakes.ts";
import { ids, PINNED_HASH } from "../support/tokens.ts";

const claims: PluginClaims = {
  type: "plugin",
  sub: ids.user,
  exp: 0,
  clusterId: ids.cluster,
  installationId: ids.installation,
  installationName: "cert-manager",
  pluginName: "cert-manager",
  pluginVersion: "1.4.0",
  definitionHash: PINNED_HASH,
};

describe("unusableInstallation", () => {
  it.each([
    { name: "pinned and running", inst: installation(), allowUnpinned: false, reason: undefined },
    { name: "pinned and pending (the cluster's RBAC decides)", inst: installation({ phase: "Pending" }), allowUnpinned: false, reason: undefined },
    { name: "token hash differs from the pin (re-pin window)", inst: installation({ definitionHash: `sha256:${"cd".repeat(32)}` }), allowUnpinned: false, reason: undefined },
    { name: "missing", inst: undefined, allowUnpinned: false, reason: "installation-unavailable" },
    { name: "another installation's name", inst: installation({ name: "other" }), allowUnpinned: false, reason: "installation-mismatch" },
    { name: "deletionTimestamp set", inst: installation({ terminating: true }), allowUnpinned: false, reason: "installation-unavailable" },
    { name: "phase Terminating", inst: installation({ phase: "Terminating" }), allowUnpinned: false, reason: "installation-unavailable" },
    { name: "empty hash", inst: installation({ definitionHash: "" }), allowUnpinned: false, reason: "installation-unavailable" },
    { name: "placeholder hash", inst: installation({ definitionHash: "sha256:unknown" }), allowUnpinned: false, reason: "installation-unavailable" },
    { name: "malformed hash", inst: installation({ definitionHash: "sha256:XYZ" }), allowUnpinned: false, reason: "installation-unavailable" },
    { name: "empty hash with allowUnpinned", inst: installation({ definitionHash: "" }), allowUnpinned: true, reason: undefined },
    { name: "placeholder hash with allowUnpinned", inst: installation({ definitionHash: "sha256:unknown" }), allowUnpinned: true, reason: undefined },
    // FUN-19 §4's switch admits the unpinned forms only ("empty or the sha256:unknown placeholder"), not any shape.
    ...["md5:abc", "sha256:XYZ", `sha256:${"AB".repeat(32)}`, "garbage", "sha256:"].map((definitionHash) => ({
      name: `malformed hash ${JSON.stringify(definitionHash)} even with allowUnpinned`,
      inst: installation({ definitionHash }),
      allowUnpinned: true,
      reason: "installation-unavailable",
    })),
    { name: "terminating even with allowUnpinned", inst: installation({ definitionHash: "", terminating: true }), allowUnpinned: true, reason: "installation-unavailable" },
  ])("$name → $reason", ({ inst, allowUnpinned, reason }) => {
    expect(unusableInstallation(inst, claims, allowUnpinned)?.reason).toBe(reason);
  });
});
