/**
 * The name a fieldSelector gives a list (src/kube-reading/field-selectors.ts: fields.ParseSelector and
 * RequiresExactMatch), read through requestInfoFor. Rows moved from request-info.test.ts.
 */
import { describeRequestInfoTable, group, podsList, type Row } from "./support/request-info-table.ts";

const rows: Row[] = [
  // fieldSelector=metadata.name=X names a list/watch (fields.ParseSelector + RequiresExactMatch)
  ...group("fieldSelector", [
    podsList("fieldSelector=metadata.name%3Dfoo", "list", "foo"),
    podsList("fieldSelector=metadata.name%3D%3Dfoo", "list", "foo"),
    podsList("fieldSelector=metadata.name!%3Dfoo", "list", ""),
    podsList("fieldSelector=metadata.name%3Dfoo,status.phase%3DRunning", "list", "foo"),
    podsList("fieldSelector=status.phase%3DRunning,metadata.name%3Dfoo", "list", "foo"),
    podsList("fieldSelector=metadata.name!%3Dbar,metadata.name%3Dfoo", "list", "foo"),
    // terms are sorted before the first metadata.name match wins
    podsList("fieldSelector=metadata.name%3Dfoo,metadata.name%3Dbar", "list", "bar"),
    podsList("fieldSelector=metadata.name%3D%3Dfoo,metadata.name%3Dbar", "list", "foo"),
    podsList("fieldSelector=metadata.namespace%3Dns", "list", ""),
    podsList("fieldSelector=metadata.name%3D", "list", ""),
    podsList("fieldSelector=", "list", ""),
    podsList("fieldSelector=,,metadata.name%3Dfoo,,", "list", "foo"),
    podsList("fieldSelector=%20metadata.name%3Dfoo", "list", ""),
    podsList("fieldSelector=metadata.name%3D%20foo", "list", " foo"),
    podsList("fieldSelector=Metadata.Name%3Dfoo", "list", ""),
    // escapes: only \\ \, \= are valid; a bare = in the value is an error
    podsList("fieldSelector=metadata.name%3Da%5C%3Db", "list", "a=b"),
    podsList("fieldSelector=metadata.name%3Da%5C,b", "list", "a,b"),
    podsList("fieldSelector=metadata.name%3Da%5C%5Cb", "list", "a\\b"),
    podsList("fieldSelector=metadata.name%3Da%5Cxb", "list", ""),
    podsList("fieldSelector=metadata.name%3Dab%5C", "list", ""),
    podsList("fieldSelector=metadata.name%3Da%3Db", "list", ""),
    podsList("fieldSelector=metadata.name%3D%3D%3Dfoo", "list", ""),
    // unparseable: a term without an operator fails the whole decode
    podsList("fieldSelector=metadata.name", "list", ""),
    podsList("fieldSelector=metadata.name%3Dfoo,bogus", "list", ""),
    podsList("fieldSelector=!!!", "list", ""),
    // watch keeps the name
    podsList("watch=true&fieldSelector=metadata.name%3Dfoo", "watch", "foo"),
    podsList("watch=1&fieldSelector=metadata.name%3D%3Dfoo", "watch", "foo"),
    // only the first fieldSelector counts
    podsList("fieldSelector=bogus&fieldSelector=metadata.name%3Dfoo", "list", ""),
  ]),
];

describeRequestInfoTable("requestInfoFor: table (field selectors)", rows);
