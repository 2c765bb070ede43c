import { configDefaults, defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 120_000,
    pool: "forks",
    // client-node's bundle (#kubernetes-client) is loaded by Node itself, as in production, not
    // re-transformed by Vite in every test file (it lies outside node_modules, which Vite inlines).
    server: { deps: { external: [/\/build\/kubernetes-client\.js$/] } },
    projects: [
      { extends: true, test: { name: "suites", include: ["test/**/*.test.ts"], exclude: [...configDefaults.exclude, "test/chaos/**"], sequence: { groupOrder: 0 } } },
      // The chaos suite bounds stalls, latencies and recovery times on real processes: it runs alone,
      // after every other suite, so two cores are not shared with the rest of the tests.
      { extends: true, test: { name: "chaos", include: ["test/chaos/**/*.test.ts"], sequence: { groupOrder: 1 } } },
    ],
  },
});
