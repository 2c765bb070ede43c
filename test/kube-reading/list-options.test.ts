/**
 * What requestInfoFor reads from a list's query (src/kube-reading/list-options.ts): list or watch, and a
 * ListOptions decode that fails drops the fieldSelector's name. Rows moved from request-info.test.ts.
 */
import { describeRequestInfoTable, group, podsList, r, type Row } from "./support/request-info-table.ts";

const rows: Row[] = [
  // GET/HEAD without a name: list, or watch from the watch parameter (runtime.Convert_Slice_string_To_bool:
  // only "0" and EqualFold "false" are false; everything else, the empty value included, is true)
  ...group("list vs watch", [
    podsList("watch=true", "watch", ""),
    podsList("watch=1", "watch", ""),
    podsList("watch=false", "list", ""),
    podsList("watch=0", "list", ""),
    podsList("watch=yes", "watch", ""),
    podsList("watch=no", "watch", ""),
    podsList("watch=TRUE", "watch", ""),
    podsList("watch=FALSE", "list", ""),
    podsList("watch=False", "list", ""),
    podsList("watch=", "watch", ""),
    podsList("watch", "watch", ""),
    podsList("watch=%200", "watch", ""),
    podsList("watch=00", "watch", ""),
    podsList("watch=false%20", "watch", ""),
    // Go EqualFold folds U+017F LATIN SMALL LETTER LONG S onto "s"
    podsList("watch=fal%C5%BFe", "list", ""),
    // Only the first value counts
    podsList("watch=false&watch=true", "list", ""),
    podsList("watch=true&watch=false", "watch", ""),
    podsList("Watch=true", "list", ""),
    // When the ListOptions decode fails, kube falls back to strings.ToLower(watch) in {false, 0}
    podsList("watch=true&limit=abc", "watch", ""),
    podsList("watch=FALSE&limit=abc", "list", ""),
    podsList("watch=fal%C5%BFe&limit=abc", "watch", ""),
    podsList("limit=abc", "list", ""),
    r("HEAD", "/api/v1/pods?watch=true", "watch", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("GET", "/apis/apps/v1/namespaces/ns/deployments?watch=1", "watch", "apis", "apps", "v1", "ns", "deployments", "", "", ["deployments"]),
    // A named get ignores the watch parameter
    r("GET", "/api/v1/namespaces/ns/pods/foo?watch=true", "get", "api", "", "v1", "ns", "pods", "", "foo", ["pods", "foo"]),
    // watch on a non-GET method changes nothing
    r("DELETE", "/api/v1/namespaces/ns/pods?watch=true", "deletecollection", "api", "", "v1", "ns", "pods", "", "", ["pods"]),
    r("POST", "/api/v1/namespaces/ns/pods?watch=true", "create", "api", "", "v1", "ns", "pods", "", "", ["pods"]),
  ]),

  ...group("fieldSelector", [
    // another parameter that fails to decode drops the name
    podsList("fieldSelector=metadata.name%3Dfoo&limit=abc", "list", ""),
    podsList("fieldSelector=metadata.name%3Dfoo&limit=", "list", ""),
    podsList("fieldSelector=metadata.name%3Dfoo&limit=9223372036854775808", "list", ""),
    podsList("fieldSelector=metadata.name%3Dfoo&limit=9223372036854775807", "list", "foo"),
    podsList("fieldSelector=metadata.name%3Dfoo&limit=-9223372036854775808", "list", "foo"),
    podsList("fieldSelector=metadata.name%3Dfoo&limit=-9223372036854775809", "list", ""),
    podsList("fieldSelector=metadata.name%3Dfoo&limit=%2B500", "list", "foo"),
    podsList("fieldSelector=metadata.name%3Dfoo&limit=1_000", "list", ""),
    podsList("fieldSelector=metadata.name%3Dfoo&limit=0x10", "list", ""),
    podsList("fieldSelector=metadata.name%3Dfoo&timeoutSeconds=abc", "list", ""),
    podsList("fieldSelector=metadata.name%3Dfoo&timeoutSeconds=30", "list", "foo"),
    podsList("fieldSelector=metadata.name%3Dfoo&resourceVersion=anything&resourceVersionMatch=x&continue=y", "list", "foo"),
    podsList("fieldSelector=metadata.name%3Dfoo&sendInitialEvents=maybe&allowWatchBookmarks=perhaps", "list", "foo"),
    podsList("fieldSelector=metadata.name%3Dfoo&unknownParam=%25%25", "list", "foo"),
    podsList("fieldSelector=metadata.name%3Dfoo&labelSelector=app%3Dweb", "list", "foo"),
    podsList("fieldSelector=metadata.name%3Dfoo&labelSelector=app%3D%3D%3D", "list", ""),
  ]),
];

describeRequestInfoTable("requestInfoFor: table (ListOptions)", rows);
