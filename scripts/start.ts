/**
 * `npm start`: with no arguments, the local stack (real OpenFGA, real kube-apiserver, portcullis,
 * demo data); with arguments (e.g. `--config FILE`), the portcullis command line itself.
 */
if (process.argv.length > 2) {
  await import("../src/cli/main.ts");
} else {
  await import("./dev-stack.ts");
}
