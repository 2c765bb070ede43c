import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { authorizationVerbsFor, type KubeHttpRequest, requestInfoFor } from "../../src/kube-reading/request-info.ts";
import { describeRequestInfoTable, group, type Input, n, parseError, r, type Row, toRequest } from "./support/request-info-table.ts";

// 1000 path segments: api, v1, then s0..s997.
const longSegments = Array.from({ length: 998 }, (_, i) => `s${i}`);
const longPath = `/api/v1/${longSegments.join("/")}`;
const longNonResourcePath = `/${Array.from({ length: 1000 }, (_, i) => `seg${i}`).join("/")}`;
const hugeSegment = "n".repeat(100_000);

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

const rows: Row[] = [
  // kube requestinfo_test.go TestGetAPIRequestInfo, success cases: resource paths
  ...group("kube: resource paths", [
    r("GET", "/api/v1/namespaces", "list", "api", "", "v1", "", "namespaces", "", "", ["namespaces"]),
    r("GET", "/api/v1/namespaces/other", "get", "api", "", "v1", "other", "namespaces", "", "other", ["namespaces", "other"]),
    r("GET", "/api/v1/namespaces/other/pods", "list", "api", "", "v1", "other", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/namespaces/other/pods/foo", "get", "api", "", "v1", "other", "pods", "", "foo", ["pods", "foo"]),
    r("HEAD", "/api/v1/namespaces/other/pods/foo", "get", "api", "", "v1", "other", "pods", "", "foo", ["pods", "foo"]),
    r("GET", "/api/v1/pods", "list", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("HEAD", "/api/v1/pods", "list", "api", "", "v1", "", "pods", "", "", ["pods"]),
  ]),

  // kube TestGetAPIRequestInfo: special verbs
  ...group("kube: special verbs", [
    r("GET", "/api/v1/proxy/namespaces/other/pods/foo", "proxy", "api", "", "v1", "other", "pods", "", "foo", ["pods", "foo"]),
    r("GET", "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource", "proxy", "api", "", "v1", "other", "pods", "", "foo", [
      "pods",
      "foo",
      "subpath",
      "not",
      "a",
      "subresource",
    ]),
    r("GET", "/api/v1/watch/pods", "watch", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/pods?watch=true", "watch", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/pods?watch=false", "list", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/watch/namespaces/other/pods", "watch", "api", "", "v1", "other", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/namespaces/other/pods?watch=1", "watch", "api", "", "v1", "other", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/namespaces/other/pods?watch=0", "list", "api", "", "v1", "other", "pods", "", "", ["pods"]),
  ]),

  // kube TestGetAPIRequestInfo: subresource identification
  ...group("kube: subresources", [
    r("GET", "/api/v1/namespaces/other/pods/foo/status", "get", "api", "", "v1", "other", "pods", "status", "foo", ["pods", "foo", "status"]),
    r("GET", "/api/v1/namespaces/other/pods/foo/proxy/subpath", "get", "api", "", "v1", "other", "pods", "proxy", "foo", [
      "pods",
      "foo",
      "proxy",
      "subpath",
    ]),
    r("PUT", "/api/v1/namespaces/other/finalize", "update", "api", "", "v1", "other", "namespaces", "finalize", "other", [
      "namespaces",
      "other",
      "finalize",
    ]),
    r("PUT", "/api/v1/namespaces/other/status", "update", "api", "", "v1", "other", "namespaces", "status", "other", [
      "namespaces",
      "other",
      "status",
    ]),
  ]),

  // kube TestGetAPIRequestInfo: verb identification
  ...group("kube: verbs", [
    r("PATCH", "/api/v1/namespaces/other/pods/foo", "patch", "api", "", "v1", "other", "pods", "", "foo", ["pods", "foo"]),
    r("DELETE", "/api/v1/namespaces/other/pods/foo", "delete", "api", "", "v1", "other", "pods", "", "foo", ["pods", "foo"]),
    r("POST", "/api/v1/namespaces/other/pods", "create", "api", "", "v1", "other", "pods", "", "", ["pods"]),
  ]),

  // kube TestGetAPIRequestInfo: deletecollection, group and version identification.
  // (kube's table says APIPrefix "api" for the /apis rows but never checks that column; it is "apis".)
  ...group("kube: deletecollection, group, version", [
    r("DELETE", "/api/v1/nodes", "deletecollection", "api", "", "v1", "", "nodes", "", "", ["nodes"]),
    r("DELETE", "/api/v1/namespaces", "deletecollection", "api", "", "v1", "", "namespaces", "", "", ["namespaces"]),
    r("DELETE", "/api/v1/namespaces/other/pods", "deletecollection", "api", "", "v1", "other", "pods", "", "", ["pods"]),
    r("DELETE", "/apis/extensions/v1/namespaces/other/pods", "deletecollection", "apis", "extensions", "v1", "other", "pods", "", "", ["pods"]),
    r("POST", "/apis/extensions/v1/namespaces/other/pods", "create", "apis", "extensions", "v1", "other", "pods", "", "", ["pods"]),
    r("POST", "/apis/extensions/v1beta3/namespaces/other/pods", "create", "apis", "extensions", "v1beta3", "other", "pods", "", "", ["pods"]),
  ]),

  // kube TestGetAPIRequestInfo, error cases: all non-resource requests
  ...group("kube: not resource requests", [
    n("GET", "/"),
    n("GET", "/api/version/"),
    n("GET", "/apis/group/version/"),
    n("GET", "/badprefix/version/resource"),
    n("GET", "/apis/version/resource"),
  ]),

  // kube TestGetNonAPIRequestInfo
  ...group("kube: resource or not", [
    r("GET", "/api/version/resource", "list", "api", "", "version", "", "resource", "", "", ["resource"]),
    r("GET", "/apis/group/version/resource/name/subresource", "get", "apis", "group", "version", "", "resource", "subresource", "name", [
      "resource",
      "name",
      "subresource",
    ]),
    r("GET", "/api/version/resource/name/subresource", "get", "api", "", "version", "", "resource", "subresource", "name", [
      "resource",
      "name",
      "subresource",
    ]),
    r("GET", "/apis/batch/v1/job", "list", "apis", "batch", "v1", "", "job", "", "", ["job"]),
    r("GET", "/apis/batch/v1/job/foo", "get", "apis", "batch", "v1", "", "job", "", "foo", ["job", "foo"]),
    r("GET", "/apis/batch/v1/job/foo/scale", "get", "apis", "batch", "v1", "", "job", "scale", "foo", ["job", "foo", "scale"]),
    n("GET", "/not-api/version/resource"),
    n("GET", "/apis/extensions/v1beta1"),
    n("GET", "/apis/extensions/v1beta1/"),
    n("GET", "/api/version"),
    n("GET", "/api"),
    n("GET", ""),
  ]),

  // kube TestSelectorParsing (verb and name; kube's FieldSelector/LabelSelector columns are not modelled)
  ...group("kube: selectors", [
    r("GET", "/apis/group/version/resource", "list", "apis", "group", "version", "", "resource", "", "", ["resource"]),
    r("GET", "/apis/group/version/resource?fieldSelector=metadata.name=name1", "list", "apis", "group", "version", "", "resource", "", "name1", [
      "resource",
    ]),
    r("GET", "/apis/group/version/resource?watch=true&fieldSelector=metadata.name=name1", "watch", "apis", "group", "version", "", "resource", "", "name1", [
      "resource",
    ]),
    r("GET", "/apis/group/version/resource?fieldSelector=foo=bar&labelSelector=baz=qux", "list", "apis", "group", "version", "", "resource", "", "", [
      "resource",
    ]),
    r("GET", "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo", "list", "apis", "group", "version", "", "resource", "", "", [
      "resource",
    ]),
    r("GET", "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=true", "watch", "apis", "group", "version", "", "resource", "", "", [
      "resource",
    ]),
    r("GET", "/apis/group/version/resource?fieldSelector=metadata.name=name1,foo&watch=false", "list", "apis", "group", "version", "", "resource", "", "", [
      "resource",
    ]),
    r("DELETE", "/apis/group/version/resource?fieldSelector=foo=bar&labelSelector=baz=qux", "deletecollection", "apis", "group", "version", "", "resource", "", "", [
      "resource",
    ]),
    r(
      "GET",
      "/apis/group/version/resource?fieldSelector=metadata.name=foo&fieldSelector=metadata.name=bar&labelSelector=foo=bar&labelSelector=foo=baz",
      "list",
      "apis",
      "group",
      "version",
      "",
      "resource",
      "",
      "foo",
      ["resource"],
    ),
    r("GET", "/apis/group/version/resource/name?fieldSelector=foo=bar&labelSelector=foo=bar", "get", "apis", "group", "version", "", "resource", "", "name", [
      "resource",
      "name",
    ]),
    r("GET", "/apis/group/version/watch/resource?fieldSelector=metadata.name=foo&labelSelector=foo=bar", "watch", "apis", "group", "version", "", "resource", "", "", [
      "resource",
    ]),
    r("GET", "/apis/group/version/watch/resource/name?fieldSelector=metadata.name=foo&labelSelector=foo=bar", "watch", "apis", "group", "version", "", "resource", "", "name", [
      "resource",
      "name",
    ]),
  ]),

  // Non-resource endpoints: verb is the lower-cased method
  ...group("non-resource", [
    n("GET", "/version"),
    n("GET", "/healthz"),
    n("GET", "/healthz/etcd"),
    n("GET", "/livez"),
    n("GET", "/readyz?verbose"),
    n("GET", "/metrics"),
    n("GET", "/openapi/v2"),
    n("GET", "/openapi/v3"),
    n("GET", "/openapi/v3/apis/apps/v1"),
    n("GET", "/openapi/v3/api/v1?hash=abc"),
    n("GET", "/.well-known/openid-configuration"),
    n("GET", "/api"),
    n("GET", "/api/"),
    n("GET", "/apis"),
    n("GET", "/apis/"),
    n("GET", "/api/v1"),
    n("GET", "/api/v1/"),
    n("GET", "/apis/apps"),
    n("GET", "/apis/apps/"),
    n("GET", "/apis/apps/v1"),
    n("GET", "/apis/apps/v1/"),
    n("POST", "/apis/apps/v1"),
    n("DELETE", "/healthz"),
    n("PUT", "/version"),
    n("OPTIONS", "/healthz"),
    n("FOO", "/healthz", "foo"),
  ]),

  // Unknown prefixes: non-resource however deep
  ...group("unknown prefix", [
    n("GET", "/foo/v1"),
    n("GET", "/foo/v1/pods"),
    n("GET", "/API/v1/pods"),
    n("GET", "/Apis/apps/v1/deployments"),
    n("GET", "/apis2/apps/v1/deployments"),
    n("GET", "/x/api/v1/pods"),
    n("GET", "/%61pi/v1/pods"),
  ]),

  // Verb from the HTTP method (exact, case-sensitive match as in Go)
  ...group("verb from method", [
    r("POST", "/api/v1/namespaces/ns/configmaps", "create", "api", "", "v1", "ns", "configmaps", "", "", ["configmaps"]),
    r("GET", "/api/v1/namespaces/ns/configmaps/cm", "get", "api", "", "v1", "ns", "configmaps", "", "cm", ["configmaps", "cm"]),
    r("HEAD", "/api/v1/namespaces/ns/configmaps/cm", "get", "api", "", "v1", "ns", "configmaps", "", "cm", ["configmaps", "cm"]),
    r("PUT", "/api/v1/namespaces/ns/configmaps/cm", "update", "api", "", "v1", "ns", "configmaps", "", "cm", ["configmaps", "cm"]),
    r("PATCH", "/apis/apps/v1/namespaces/ns/deployments/d", "patch", "apis", "apps", "v1", "ns", "deployments", "", "d", ["deployments", "d"]),
    r("DELETE", "/apis/apps/v1/namespaces/ns/deployments/d", "delete", "apis", "apps", "v1", "ns", "deployments", "", "d", ["deployments", "d"]),
    // PUT and PATCH without a name keep their verb: only get and delete turn into collection verbs
    r("PUT", "/api/v1/namespaces/ns/configmaps", "update", "api", "", "v1", "ns", "configmaps", "", "", ["configmaps"]),
    r("PATCH", "/api/v1/namespaces/ns/configmaps", "patch", "api", "", "v1", "ns", "configmaps", "", "", ["configmaps"]),
    r("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "create", "apis", "authorization.k8s.io", "v1", "", "selfsubjectaccessreviews", "", "", [
      "selfsubjectaccessreviews",
    ]),
    r("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin", "get", "apis", "rbac.authorization.k8s.io", "v1", "", "clusterroles", "", "admin", [
      "clusterroles",
      "admin",
    ]),
    // Unknown and lower-case methods give the empty verb on resource paths
    r("OPTIONS", "/api/v1/pods", "", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("OPTIONS", "/api/v1/namespaces/ns/pods/p", "", "api", "", "v1", "ns", "pods", "", "p", ["pods", "p"]),
    r("CONNECT", "/api/v1/namespaces/ns/pods/p", "", "api", "", "v1", "ns", "pods", "", "p", ["pods", "p"]),
    r("TRACE", "/api/v1/pods", "", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("get", "/api/v1/pods", "", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("Get", "/api/v1/namespaces/ns/pods/p", "", "api", "", "v1", "ns", "pods", "", "p", ["pods", "p"]),
    r("delete", "/api/v1/pods", "", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("", "/api/v1/pods", "", "api", "", "v1", "", "pods", "", "", ["pods"]),
  ]),

  // fieldSelector=metadata.name=X names a list/watch (fields.ParseSelector + RequiresExactMatch + IsValidPathSegmentName):
  // the selectors' own rows are in field-selectors.test.ts, list-options.test.ts and object-names.test.ts
  ...group("fieldSelector", [
    // the name goes with the list, not with deletecollection, a named get or a path verb
    r("DELETE", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dfoo", "deletecollection", "api", "", "v1", "ns", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/namespaces/ns/pods/bar?fieldSelector=metadata.name%3Dfoo", "get", "api", "", "v1", "ns", "pods", "", "bar", ["pods", "bar"]),
    r("GET", "/api/v1/watch/namespaces/ns/pods?fieldSelector=metadata.name%3Dfoo", "watch", "api", "", "v1", "ns", "pods", "", "", ["pods"]),
    // a namespaces list named by fieldSelector sets the name, not the namespace
    r("GET", "/api/v1/namespaces?fieldSelector=metadata.name%3Dkube-system", "list", "api", "", "v1", "", "namespaces", "", "kube-system", ["namespaces"]),
  ]),

  // namespaces/{name} special cases
  ...group("namespaces", [
    r("POST", "/api/v1/namespaces", "create", "api", "", "v1", "", "namespaces", "", "", ["namespaces"]),
    r("DELETE", "/api/v1/namespaces/x", "delete", "api", "", "v1", "x", "namespaces", "", "x", ["namespaces", "x"]),
    r("PATCH", "/api/v1/namespaces/x", "patch", "api", "", "v1", "x", "namespaces", "", "x", ["namespaces", "x"]),
    r("PUT", "/api/v1/namespaces/x/finalize", "update", "api", "", "v1", "x", "namespaces", "finalize", "x", ["namespaces", "x", "finalize"]),
    r("GET", "/api/v1/namespaces/x/status", "get", "api", "", "v1", "x", "namespaces", "status", "x", ["namespaces", "x", "status"]),
    r("PATCH", "/api/v1/namespaces/x/status", "patch", "api", "", "v1", "x", "namespaces", "status", "x", ["namespaces", "x", "status"]),
    r("GET", "/api/v1/namespaces/x/status/extra", "get", "api", "", "v1", "x", "namespaces", "status", "x", ["namespaces", "x", "status", "extra"]),
    r("GET", "/api/v1/namespaces/x/pods", "list", "api", "", "v1", "x", "pods", "", "", ["pods"]),
    // a namespace may be called "status": it is the name, not a subresource
    r("GET", "/api/v1/namespaces/status", "get", "api", "", "v1", "status", "namespaces", "", "status", ["namespaces", "status"]),
    r("GET", "/api/v1/namespaces/finalize/pods", "list", "api", "", "v1", "finalize", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/namespaces/status/status", "get", "api", "", "v1", "status", "namespaces", "status", "status", ["namespaces", "status", "status"]),
    // only status and finalize are namespace subresources
    r("GET", "/api/v1/namespaces/x/scale", "list", "api", "", "v1", "x", "scale", "", "", ["scale"]),
    r("GET", "/api/v1/namespaces/x/namespaces", "list", "api", "", "v1", "x", "namespaces", "", "", ["namespaces"]),
    r("GET", "/api/v1/namespaces/x/namespaces/y", "get", "api", "", "v1", "x", "namespaces", "", "y", ["namespaces", "y"]),
    r("GET", "/apis/apps/v1/namespaces/x/deployments", "list", "apis", "apps", "v1", "x", "deployments", "", "", ["deployments"]),
    r("GET", "/apis/apps/v1/namespaces/x", "get", "apis", "apps", "v1", "x", "namespaces", "", "x", ["namespaces", "x"]),
    // "namespaces" not in first position is an ordinary segment
    r("GET", "/api/v1/pods/namespaces/x", "get", "api", "", "v1", "", "pods", "x", "namespaces", ["pods", "namespaces", "x"]),
  ]),

  // Subresources
  ...group("subresources", [
    r("GET", "/api/v1/namespaces/ns/pods/p/log", "get", "api", "", "v1", "ns", "pods", "log", "p", ["pods", "p", "log"]),
    r("GET", "/api/v1/namespaces/ns/pods/p/exec?command=ls&stdout=true", "get", "api", "", "v1", "ns", "pods", "exec", "p", ["pods", "p", "exec"]),
    r("POST", "/api/v1/namespaces/ns/pods/p/exec", "create", "api", "", "v1", "ns", "pods", "exec", "p", ["pods", "p", "exec"]),
    r("POST", "/api/v1/namespaces/ns/pods/p/attach", "create", "api", "", "v1", "ns", "pods", "attach", "p", ["pods", "p", "attach"]),
    r("GET", "/api/v1/namespaces/ns/pods/p/portforward", "get", "api", "", "v1", "ns", "pods", "portforward", "p", ["pods", "p", "portforward"]),
    r("POST", "/api/v1/namespaces/ns/pods/p/eviction", "create", "api", "", "v1", "ns", "pods", "eviction", "p", ["pods", "p", "eviction"]),
    r("POST", "/api/v1/namespaces/ns/pods/p/binding", "create", "api", "", "v1", "ns", "pods", "binding", "p", ["pods", "p", "binding"]),
    r("PATCH", "/api/v1/namespaces/ns/pods/p/ephemeralcontainers", "patch", "api", "", "v1", "ns", "pods", "ephemeralcontainers", "p", [
      "pods",
      "p",
      "ephemeralcontainers",
    ]),
    r("GET", "/apis/apps/v1/namespaces/ns/deployments/d/scale", "get", "apis", "apps", "v1", "ns", "deployments", "scale", "d", ["deployments", "d", "scale"]),
    r("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale", "update", "apis", "apps", "v1", "ns", "deployments", "scale", "d", ["deployments", "d", "scale"]),
    r("PATCH", "/apis/apps/v1/namespaces/ns/deployments/d/status", "patch", "apis", "apps", "v1", "ns", "deployments", "status", "d", [
      "deployments",
      "d",
      "status",
    ]),
    r("GET", "/api/v1/nodes/n1/proxy/metrics", "get", "api", "", "v1", "", "nodes", "proxy", "n1", ["nodes", "n1", "proxy", "metrics"]),
    r("GET", "/api/v1/namespaces/ns/services/https:svc:443/proxy/a/b", "get", "api", "", "v1", "ns", "services", "proxy", "https:svc:443", [
      "services",
      "https:svc:443",
      "proxy",
      "a",
      "b",
    ]),
    // DELETE on a subresource has a name, so it stays delete
    r("DELETE", "/api/v1/namespaces/ns/pods/p/status", "delete", "api", "", "v1", "ns", "pods", "status", "p", ["pods", "p", "status"]),
  ]),

  // Legacy path verbs: watch keeps subresources, proxy never has one
  ...group("path verbs", [
    r("GET", "/api/v1/watch/namespaces/ns/pods/name", "watch", "api", "", "v1", "ns", "pods", "", "name", ["pods", "name"]),
    r("GET", "/api/v1/watch/namespaces/ns/pods/name/status", "watch", "api", "", "v1", "ns", "pods", "status", "name", ["pods", "name", "status"]),
    r("GET", "/api/v1/watch/namespaces", "watch", "api", "", "v1", "", "namespaces", "", "", ["namespaces"]),
    r("GET", "/api/v1/watch/namespaces/ns", "watch", "api", "", "v1", "ns", "namespaces", "", "ns", ["namespaces", "ns"]),
    r("GET", "/apis/apps/v1/watch/namespaces/ns/deployments", "watch", "apis", "apps", "v1", "ns", "deployments", "", "", ["deployments"]),
    r("GET", "/api/v1/watch/pods?watch=false", "watch", "api", "", "v1", "", "pods", "", "", ["pods"]),
    // the method does not matter once the path names the verb
    r("DELETE", "/api/v1/watch/pods", "watch", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("POST", "/api/v1/proxy/nodes/n1", "proxy", "api", "", "v1", "", "nodes", "", "n1", ["nodes", "n1"]),
    r("GET", "/api/v1/proxy/nodes/n1/metrics", "proxy", "api", "", "v1", "", "nodes", "", "n1", ["nodes", "n1", "metrics"]),
    r("PUT", "/api/v1/proxy/namespaces/ns/services/svc:80/path/to", "proxy", "api", "", "v1", "ns", "services", "", "svc:80", [
      "services",
      "svc:80",
      "path",
      "to",
    ]),
    r("GET", "/api/v1/proxy/pods", "proxy", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/proxy/namespaces/ns", "proxy", "api", "", "v1", "ns", "namespaces", "", "ns", ["namespaces", "ns"]),
    // a path verb only counts right after the version
    r("GET", "/api/v1/namespaces/ns/watch/pods", "get", "api", "", "v1", "ns", "watch", "", "pods", ["watch", "pods"]),
    r("GET", "/api/v1/pods/watch", "get", "api", "", "v1", "", "pods", "", "watch", ["pods", "watch"]),
    r("GET", "/api/v1/WATCH/pods", "get", "api", "", "v1", "", "WATCH", "", "pods", ["WATCH", "pods"]),
    // a path verb with nothing after it: kube returns an error (HTTP 500, never authorized)
    parseError("GET", "/api/v1/watch", "api", "", "v1"),
    parseError("GET", "/api/v1/watch/", "api", "", "v1"),
    parseError("POST", "/api/v1/proxy", "api", "", "v1"),
    parseError("GET", "/apis/apps/v1/watch", "apis", "apps", "v1"),
    parseError("OPTIONS", "/apis/apps/v1/proxy?x=1", "apis", "apps", "v1"),
  ]),

  // Trailing slashes and empty segments (strings.Trim then strings.Split, no normalisation)
  ...group("slashes", [
    r("GET", "/api/v1/pods/", "list", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/pods///", "list", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("GET", "///api/v1/pods", "list", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("GET", "api/v1/pods", "list", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/namespaces/ns/pods/foo/", "get", "api", "", "v1", "ns", "pods", "", "foo", ["pods", "foo"]),
    r("DELETE", "/api/v1/namespaces/ns/pods/", "deletecollection", "api", "", "v1", "ns", "pods", "", "", ["pods"]),
    // /api//v1/pods: the version is "", the resource "v1", the name "pods"
    r("GET", "/api//v1/pods", "get", "api", "", "", "", "v1", "", "pods", ["v1", "pods"]),
    r("GET", "/api/v1//pods", "get", "api", "", "v1", "", "", "", "pods", ["", "pods"]),
    r("GET", "//api//v1//pods", "list", "api", "", "", "", "v1", "pods", "", ["v1", "", "pods"]),
    r("GET", "/apis//v1/pods", "list", "apis", "", "v1", "", "pods", "", "", ["pods"]),
    // an empty namespace segment gives namespace "": a cluster-wide list
    r("GET", "/api/v1/namespaces//pods", "list", "api", "", "v1", "", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/namespaces/ns//p", "get", "api", "", "v1", "ns", "", "", "p", ["", "p"]),
    r("DELETE", "/api/v1/namespaces/ns/pods//", "deletecollection", "api", "", "v1", "ns", "pods", "", "", ["pods"]),
    r("DELETE", "/api/v1/namespaces/ns/pods//status", "deletecollection", "api", "", "v1", "ns", "pods", "status", "", ["pods", "", "status"]),
    n("GET", "//"),
    n("GET", "///"),
    n("GET", "/api//"),
    n("GET", "/apis//v1"),
    n("GET", "/apis/apps//"),
  ]),

  // Odd segments: taken literally, never decoded or normalised
  ...group("odd segments", [
    r("GET", "/api/v1/namespaces/ns/pods/a%2Fb", "get", "api", "", "v1", "ns", "pods", "", "a%2Fb", ["pods", "a%2Fb"]),
    r("GET", "/api/v1/namespaces/ns/pods/%2E%2E", "get", "api", "", "v1", "ns", "pods", "", "%2E%2E", ["pods", "%2E%2E"]),
    r("GET", "/api/v1/namespaces/ns/pods/foo/../bar", "get", "api", "", "v1", "ns", "pods", "..", "foo", ["pods", "foo", "..", "bar"]),
    r("GET", "/api/v1/namespaces/../pods", "list", "api", "", "v1", "..", "pods", "", "", ["pods"]),
    r("GET", "/api/v1/./pods", "get", "api", "", "v1", "", ".", "", "pods", [".", "pods"]),
    r("GET", "/api/v1/namespaces/ns/pods/%zz", "get", "api", "", "v1", "ns", "pods", "", "%zz", ["pods", "%zz"]),
    r("GET", "/api/v1/namespaces/ns/pods/p%", "get", "api", "", "v1", "ns", "pods", "", "p%", ["pods", "p%"]),
    r("GET", "/api/v1/namespaces/ns/pods/ünï", "get", "api", "", "v1", "ns", "pods", "", "ünï", ["pods", "ünï"]),
    r("GET", "/api/v1/namespaces/ns/pods/a b", "get", "api", "", "v1", "ns", "pods", "", "a b", ["pods", "a b"]),
    r("GET", "/api/v1/namespaces/ns/pods/\u0000", "get", "api", "", "v1", "ns", "pods", "", "\u0000", ["pods", "\u0000"]),
    r("GET", "/api/v1/namespaces/ns/pods/p;q", "get", "api", "", "v1", "ns", "pods", "", "p;q", ["pods", "p;q"]),
    r("GET", "/api/v1/namespaces/ns/pods/p\\q", "get", "api", "", "v1", "ns", "pods", "", "p\\q", ["pods", "p\\q"]),
    r("GET", "/api/v1/__proto__/constructor", "get", "api", "", "v1", "", "__proto__", "", "constructor", ["__proto__", "constructor"]),
    r("GET", `/api/v1/namespaces/ns/pods/${hugeSegment}`, "get", "api", "", "v1", "ns", "pods", "", hugeSegment, ["pods", hugeSegment]),
  ]),

  // Long paths: every part past the subresource is kept in parts and not interpreted
  ...group("long paths", [
    r("GET", longPath, "get", "api", "", "v1", "", "s0", "s2", "s1", longSegments),
    r("GET", `/api/v1/proxy/${longSegments.join("/")}`, "proxy", "api", "", "v1", "", "s0", "", "s1", longSegments),
    n("GET", longNonResourcePath),
  ]),
];

describeRequestInfoTable("requestInfoFor: table", rows);

// ---------------------------------------------------------------------------
// authorizationVerbsFor (Kubernetes >= 1.35, AuthorizePodWebsocketUpgradeCreatePermission)
// ---------------------------------------------------------------------------

interface VerbsRow {
  name: string;
  input: Input & { webSocket: boolean };
  expected: string[];
}

function v(method: string, url: string, webSocket: boolean, expected: string[]): VerbsRow {
  return { name: `${method} ${url}${webSocket ? " (websocket)" : ""}`, input: { method, url, webSocket }, expected };
}

const verbsRows: VerbsRow[] = [
  // exec, attach, portforward on core pods: a get also needs create
  v("GET", "/api/v1/namespaces/ns/pods/p/exec?command=sh&stdin=true", true, ["get", "create"]),
  v("GET", "/api/v1/namespaces/ns/pods/p/attach", true, ["get", "create"]),
  v("GET", "/api/v1/namespaces/ns/pods/p/portforward?ports=8080", true, ["get", "create"]),
  // kube's check does not look at the upgrade headers: a plain GET gets it too
  v("GET", "/api/v1/namespaces/ns/pods/p/exec", false, ["get", "create"]),
  v("GET", "/api/v1/namespaces/ns/pods/p/attach", false, ["get", "create"]),
  v("GET", "/api/v1/namespaces/ns/pods/p/portforward", false, ["get", "create"]),
  v("HEAD", "/api/v1/namespaces/ns/pods/p/exec", false, ["get", "create"]),
  v("GET", "/api/v1/pods/p/exec", true, ["get", "create"]),
  v("GET", "/api/v2/namespaces/ns/pods/p/exec", true, ["get", "create"]),
  v("GET", "/api/v1/namespaces/ns/pods/p/exec/extra", true, ["get", "create"]),
  // SPDY (POST) is already create
  v("POST", "/api/v1/namespaces/ns/pods/p/exec", false, ["create"]),
  v("POST", "/api/v1/namespaces/ns/pods/p/attach", true, ["create"]),
  v("POST", "/api/v1/namespaces/ns/pods/p/portforward", false, ["create"]),
  // other verbs never reach the connect handler
  v("PUT", "/api/v1/namespaces/ns/pods/p/exec", true, ["update"]),
  v("DELETE", "/api/v1/namespaces/ns/pods/p/exec", false, ["delete"]),
  v("OPTIONS", "/api/v1/namespaces/ns/pods/p/exec", true, [""]),
  // not in scope: proxy subresources, other subresources, other resources, other groups
  v("GET", "/api/v1/namespaces/ns/pods/p/proxy", true, ["get"]),
  v("GET", "/api/v1/namespaces/ns/services/s/proxy", true, ["get"]),
  v("GET", "/api/v1/nodes/n/proxy", true, ["get"]),
  v("GET", "/api/v1/namespaces/ns/pods/p/log?follow=true", true, ["get"]),
  v("GET", "/api/v1/namespaces/ns/pods/p/status", true, ["get"]),
  v("GET", "/api/v1/namespaces/ns/pods/p/Exec", true, ["get"]),
  v("GET", "/api/v1/namespaces/ns/pods/exec", true, ["get"]),
  v("GET", "/api/v1/namespaces/ns/pod/p/exec", true, ["get"]),
  v("GET", "/apis/example.com/v1/namespaces/ns/pods/p/exec", true, ["get"]),
  v("GET", "/api/v1/watch/namespaces/ns/pods/p/exec", true, ["watch"]),
  v("GET", "/api/v1/proxy/namespaces/ns/pods/p/exec", true, ["proxy"]),
  // everything else: the request's own verb
  v("GET", "/api/v1/namespaces/ns/pods", true, ["list"]),
  v("GET", "/api/v1/namespaces/ns/pods?watch=true", true, ["watch"]),
  v("DELETE", "/api/v1/namespaces/ns/pods", false, ["deletecollection"]),
  v("GET", "/healthz", true, ["get"]),
  v("GET", "/api/v1", false, ["get"]),
  // a parse error keeps kube's partial verb (the caller denies on parseError)
  v("GET", "/api/v1/watch", true, ["get"]),
];

describe("authorizationVerbsFor: table", () => {
  for (const { name, input, expected } of verbsRows) {
    it(name, () => {
      const info = requestInfoFor(toRequest(input));
      expect(authorizationVerbsFor(info), `${input.method} ${input.url} webSocket=${input.webSocket}`).toEqual(expected);
    });
  }
});

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

const anyString = fc.string({ unit: "binary", maxLength: 300 });

const methods = fc.oneof(
  fc.constantFrom("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE", "get", ""),
  anyString,
);

/** Paths built from the vocabulary the parser branches on, plus arbitrary segments. */
const segment = fc.oneof(
  fc.constantFrom("api", "apis", "v1", "apps", "namespaces", "ns", "watch", "proxy", "status", "finalize", "pods", "exec", "", "..", ".", "%2F", "%"),
  anyString,
);
const structuredPath = fc.tuple(fc.constantFrom("", "/", "//"), fc.array(segment, { maxLength: 12 }), fc.constantFrom("", "/", "//")).map(
  ([lead, parts, trail]) => lead + parts.join("/") + trail,
);

const queryValue = fc.oneof(
  fc.constantFrom("true", "1", "false", "0", "", "FALSE", "fal\u017fe", "metadata.name=foo", "metadata.name=a\\,b", "a in (b)", "!x", "abc", "-5"),
  anyString,
);
const structuredQuery = fc
  .array(fc.tuple(fc.constantFrom("watch", "fieldSelector", "labelSelector", "limit", "timeoutSeconds", "other"), queryValue), { maxLength: 6 })
  .map((pairs) => {
    const query = new URLSearchParams();
    for (const [key, value] of pairs) query.append(key, value);
    return query;
  });

function checkTotalAndDeterministic(req: KubeHttpRequest): void {
  const first = requestInfoFor(req);
  const second = requestInfoFor(req);
  expect(second).toEqual(first);
  expect(first.path).toBe(req.path);
  if (!first.isResourceRequest) {
    expect(first.verb).toBe(req.method.toLowerCase());
  } else if (first.parseError === undefined) {
    expect(first.parts.length).toBeGreaterThan(0);
    expect(first.resource).toBe(first.parts[0]);
    expect(first.name).not.toBeUndefined();
  }
  const verbs = authorizationVerbsFor(first);
  expect(verbs.length).toBeGreaterThan(0);
  expect(verbs[0]).toBe(first.verb);
}

describe("requestInfoFor: properties", () => {
  it("never throws and is deterministic for any method, path and query string", () => {
    fc.assert(
      fc.property(methods, anyString, anyString, (method, path, rawQuery) => {
        checkTotalAndDeterministic({ method, path, query: new URLSearchParams(rawQuery) });
      }),
      { numRuns: 2000 },
    );
  });

  it("never throws and is deterministic on paths and queries built from the parser's vocabulary", () => {
    fc.assert(
      fc.property(methods, structuredPath, structuredQuery, (method, path, query) => {
        checkTotalAndDeterministic({ method, path, query });
      }),
      { numRuns: 3000 },
    );
  });

  it("a path that does not start with api or apis is never a resource request", () => {
    fc.assert(
      fc.property(methods, fc.array(segment, { maxLength: 8 }), (method, parts) => {
        fc.pre(parts.length > 0 && parts[0] !== "" && parts[0] !== "api" && parts[0] !== "apis");
        const info = requestInfoFor({ method, path: `/${parts.join("/")}`, query: new URLSearchParams() });
        expect(info.isResourceRequest).toBe(false);
      }),
      { numRuns: 1000 },
    );
  });

  // A parser that backtracked on these would not finish within the test timeout.
  it("answers hostile inputs (100,000-character selectors, 50,000 segments)", () => {
    const commas = ",".repeat(100_000);
    const info = requestInfoFor({
      method: "GET",
      path: `/api/v1/${"p/".repeat(50_000)}`,
      query: new URLSearchParams({ fieldSelector: `${commas}metadata.name=x`, labelSelector: `${"a,".repeat(50_000)}a` }),
    });
    expect(info).toMatchObject({ isResourceRequest: true, verb: "get", namespace: "", resource: "p" });
  });
});
