/**
 * Which labelSelectors parse (src/kube-reading/label-selectors.ts: labels.Parse), read through
 * requestInfoFor: an invalid one fails the ListOptions decode and drops the fieldSelector's name.
 * Rows moved from request-info.test.ts.
 */
import { describeRequestInfoTable, group, labelProbe, type Row } from "./support/request-info-table.ts";

const rows: Row[] = [
  // labelSelector only matters through the decode: labels.Parse failing drops the fieldSelector name
  ...group("labelSelector validity", [
    labelProbe("", true),
    labelProbe("app", true),
    labelProbe("!app", true),
    labelProbe("app=web", true),
    labelProbe("app==web", true),
    labelProbe("app!=web", true),
    labelProbe("app=", true),
    labelProbe("app in (a,b)", true),
    labelProbe("app notin ()", true),
    labelProbe("x in (foo,,baz),y,z notin ()", true),
    labelProbe("in in (in)", true),
    labelProbe("example.com/app=web", true),
    labelProbe(" app = web , tier ", true),
    labelProbe("replicas>5", true),
    labelProbe("replicas<05", true),
    labelProbe("replicas>-5", false),
    labelProbe("replicas>x", false),
    labelProbe("replicas>", false),
    labelProbe("replicas>99999999999999999999", false),
    labelProbe("app=web,", false),
    labelProbe(",app", false),
    labelProbe("a,,b", false),
    labelProbe("=web", false),
    labelProbe("app=web=x", false),
    labelProbe("!app=web", false),
    labelProbe("app web", false),
    labelProbe("app in a", false),
    labelProbe("app in (a b)", false),
    labelProbe("app in (a", false),
    labelProbe("-app=web", false),
    labelProbe("app=-web", false),
    labelProbe("Example.com/app=web", false),
    labelProbe("/app", false),
    labelProbe("a/b/c", false),
    labelProbe(`${"k".repeat(63)}=v`, true),
    labelProbe(`${"k".repeat(64)}=v`, false),
    labelProbe(`k=${"v".repeat(64)}`, false),
    labelProbe("app=wéb", false),
    // the lexer reads NUL as end of input: at the start of a token it ends the stream...
    labelProbe("app=web \u0000!!!", true),
    // ...inside a token it only ends that token
    labelProbe("app=web\u0000!!!", false),
  ]),
];

describeRequestInfoTable("requestInfoFor: table (label selectors)", rows);
