// requestinfo-oracle answers, for one HTTP request per input line, what
// kube-apiserver computes from it before authorization, using Kubernetes' own
// Go code (k8s.io/apiserver at the version the tests' kube-apiserver is built
// from) and the same Go toolchain, hence the same net/url limits.
//
// Input, one JSON object per line:
//
//	{"method":"GET","path":"/api/v1/pods","rawQuery":"watch=1","headers":{"upgrade":"websocket"}}
//
// rawQuery is omitted (or null) for a request target without "?". Output, one
// JSON object per input line, in order: see the answer type. The process
// stays up until stdin closes, so a test spawns it once and streams batches.
//
// The request goes through what kube-apiserver runs before authorization:
// net/http's request reading (http.ReadRequest: the request line and
// url.ParseRequestURI), filters.WithRequestInfo with kube-apiserver's
// RequestInfoFactory, filters.WithRequestDeadline (which refuses a bad
// ?timeout=), then filters.GetAuthorizerAttributes for what the authorizer is
// asked. It answers url.ParseQuery's result separately, error included, and,
// for a delete, the DeleteOptions the delete handler decodes from the query.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/klog/v2"
)

type input struct {
	// ID is echoed back, so the caller can check answers line up with requests.
	ID       json.RawMessage   `json:"id"`
	Method   string            `json:"method"`
	Path     string            `json:"path"`
	RawQuery *string           `json:"rawQuery"`
	Headers  map[string]string `json:"headers"`
}

type queryAnswer struct {
	Values map[string][]string `json:"values"`
	Error  string              `json:"error"`
}

type requestInfoAnswer struct {
	IsResourceRequest bool     `json:"isResourceRequest"`
	Path              string   `json:"path"`
	Verb              string   `json:"verb"`
	APIPrefix         string   `json:"apiPrefix"`
	APIGroup          string   `json:"apiGroup"`
	APIVersion        string   `json:"apiVersion"`
	Namespace         string   `json:"namespace"`
	Resource          string   `json:"resource"`
	Subresource       string   `json:"subresource"`
	Name              string   `json:"name"`
	Parts             []string `json:"parts"`
	FieldSelector     string   `json:"fieldSelector"`
	LabelSelector     string   `json:"labelSelector"`
}

// attributesAnswer is one authorizer.Attributes the API server checks.
type attributesAnswer struct {
	ResourceRequest bool   `json:"resourceRequest"`
	Verb            string `json:"verb"`
	APIGroup        string `json:"apiGroup"`
	APIVersion      string `json:"apiVersion"`
	Resource        string `json:"resource"`
	Subresource     string `json:"subresource"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	Path            string `json:"path"`
}

// deleteOptionsAnswer is what handlers/delete.go reads from the query of a
// DELETE without a body (ParameterCodec.DecodeParameters of req.URL.Query()
// into metav1.DeleteOptions), before it authorizes the unsafe delete.
type deleteOptionsAnswer struct {
	// UnsafeDelete is ptr.Deref(IgnoreStoreReadErrorWithClusterBreakingPotential,
	// false): the handler then also authorizes "unsafe-delete-ignore-read-errors"
	// (AllowUnsafeMalformedObjectDeletion, on by default in 1.37).
	UnsafeDelete bool `json:"unsafeDelete"`
	// Error is DecodeParameters' error: the handler answers 400.
	Error string `json:"error"`
}

type answer struct {
	ID json.RawMessage `json:"id,omitempty"`
	// Query is url.ParseQuery of the raw query, as kube's handlers read it
	// (req.URL.Query() keeps the values and drops the error).
	Query queryAnswer `json:"query"`
	// Rejected names the stage that answers the request before authorization:
	// "" (none), "http" (net/http cannot read it: 400), "request-info"
	// (NewRequestInfo fails: 500), "request-deadline" (bad ?timeout=: 400).
	Rejected       string             `json:"rejected"`
	RejectedDetail string             `json:"rejectedDetail"`
	RequestInfo    *requestInfoAnswer `json:"requestInfo"`
	// Attributes are every authorization check the request needs, in order.
	Attributes []attributesAnswer `json:"attributes"`
	// DeleteOptions is set for a request authorized as delete or deletecollection.
	DeleteOptions *deleteOptionsAnswer `json:"deleteOptions"`
	// InvalidUTF8 is true when some string above held bytes that are not
	// UTF-8 (JSON shows them as U+FFFD, so the strings alone cannot tell).
	InvalidUTF8 bool `json:"invalidUtf8"`
}

// kube-apiserver's RequestInfoFactory, as server.NewRequestInfoResolver
// builds it from the default Config: every prefix is "api" or "apis", and
// "api" (DefaultLegacyAPIPrefix) carries no group.
var resolver = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// kube-apiserver's LongRunningFunc (pkg/controlplane/apiserver config):
// these skip WithRequestDeadline, so their ?timeout= is never parsed there.
var longRunning = genericfilters.BasicLongRunningRequestCheck(
	sets.NewString("watch", "proxy"),
	sets.NewString("attach", "exec", "proxy", "log", "portforward"),
)

// podConnectSubresourcesRequiringCreate restates (it is not in
// k8s.io/apiserver) the rule of the core pod registry's exec, attach and
// portforward Connect handlers from Kubernetes 1.35, feature gate
// AuthorizePodWebsocketUpgradeCreatePermission (beta, on by default): a
// request reaching them with a verb other than "create" (the WebSocket GET)
// is also authorized for "create".
var podConnectSubresourcesRequiringCreate = sets.NewString("exec", "attach", "portforward")

func main() {
	quietKlog()
	codecs := statusCodecs()
	reader := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for {
		line, err := reader.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var in input
			var a answer
			if jerr := json.Unmarshal(line, &in); jerr != nil {
				a = answer{Rejected: "oracle-input", RejectedDetail: jerr.Error()}
			} else {
				a = evaluate(in, codecs)
				a.ID = in.ID
			}
			if eerr := enc.Encode(a); eerr != nil {
				fmt.Fprintln(os.Stderr, "requestinfo-oracle:", eerr)
				os.Exit(1)
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "requestinfo-oracle:", err)
			os.Exit(1)
		}
		// Flush once the caller's batch is consumed, not per line.
		if reader.Buffered() == 0 {
			if ferr := out.Flush(); ferr != nil {
				os.Exit(1)
			}
		}
	}
}

func quietKlog() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}

func statusCodecs() runtime.NegotiatedSerializer {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(scheme).WithoutConversion()
}

func evaluate(in input, codecs runtime.NegotiatedSerializer) answer {
	var a answer
	target := in.Path
	if in.RawQuery != nil {
		target += "?" + *in.RawQuery
	}
	req, err := readRequest(in.Method, target, in.Headers)
	if err != nil {
		_, rawQuery, _ := strings.Cut(target, "?")
		a.Query = parseQuery(rawQuery)
		a.Rejected, a.RejectedDetail = "http", err.Error()
		a.InvalidUTF8 = anyInvalid(a)
		return a
	}
	// The query as the handlers read it: from the target net/http parsed (a "?" in path counts).
	a.Query = parseQuery(req.URL.RawQuery)

	var attrs authorizer.Attributes
	var info *request.RequestInfo
	reached := false
	authorization := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached = true
		info, _ = request.RequestInfoFrom(r.Context())
		attrs, err = filters.GetAuthorizerAttributes(r.Context())
	})
	deadline := filters.WithRequestDeadline(authorization, nil, nil, longRunning, codecs, 60*time.Second)
	withInfo := filters.WithRequestInfo(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, _ = request.RequestInfoFrom(r.Context())
		deadline.ServeHTTP(w, r)
	}), resolver)
	rec := httptest.NewRecorder()
	withInfo.ServeHTTP(rec, req)

	if info != nil {
		a.RequestInfo = &requestInfoAnswer{
			IsResourceRequest: info.IsResourceRequest,
			Path:              info.Path,
			Verb:              info.Verb,
			APIPrefix:         info.APIPrefix,
			APIGroup:          info.APIGroup,
			APIVersion:        info.APIVersion,
			Namespace:         info.Namespace,
			Resource:          info.Resource,
			Subresource:       info.Subresource,
			Name:              info.Name,
			Parts:             append([]string{}, info.Parts...),
			FieldSelector:     info.FieldSelector,
			LabelSelector:     info.LabelSelector,
		}
	}
	switch {
	case !reached && info == nil:
		a.Rejected, a.RejectedDetail = "request-info", fmt.Sprintf("HTTP %d: %s", rec.Code, strings.TrimSpace(rec.Body.String()))
	case !reached:
		a.Rejected, a.RejectedDetail = "request-deadline", fmt.Sprintf("HTTP %d", rec.Code)
	case err != nil:
		a.Rejected, a.RejectedDetail = "authorizer-attributes", err.Error()
	default:
		a.Attributes = authorizationChecks(attrs)
		if verb := attrs.GetVerb(); attrs.IsResourceRequest() && (verb == "delete" || verb == "deletecollection") {
			a.DeleteOptions = deleteOptionsFromQuery(req.URL.Query())
		}
	}
	a.InvalidUTF8 = anyInvalid(a)
	return a
}

// readRequest reads the request as net/http's server does, so a target it
// refuses (bad escape in the path, control character, ...) is refused here.
func readRequest(method, target string, headers map[string]string) (*http.Request, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: kube-apiserver\r\n", method, target)
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&b, "%s: %s\r\n", name, headers[name])
	}
	b.WriteString("\r\n")
	return http.ReadRequest(bufio.NewReader(strings.NewReader(b.String())))
}

func parseQuery(raw string) queryAnswer {
	values, err := url.ParseQuery(raw)
	q := queryAnswer{Values: values}
	if err != nil {
		q.Error = err.Error()
	}
	return q
}

func deleteOptionsFromQuery(query url.Values) *deleteOptionsAnswer {
	options := &metav1.DeleteOptions{}
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(query, metav1.SchemeGroupVersion, options); err != nil {
		return &deleteOptionsAnswer{Error: err.Error()}
	}
	unsafe := options.IgnoreStoreReadErrorWithClusterBreakingPotential
	return &deleteOptionsAnswer{UnsafeDelete: unsafe != nil && *unsafe}
}

func authorizationChecks(attrs authorizer.Attributes) []attributesAnswer {
	first := attributesAnswer{
		ResourceRequest: attrs.IsResourceRequest(),
		Verb:            attrs.GetVerb(),
		APIGroup:        attrs.GetAPIGroup(),
		APIVersion:      attrs.GetAPIVersion(),
		Resource:        attrs.GetResource(),
		Subresource:     attrs.GetSubresource(),
		Namespace:       attrs.GetNamespace(),
		Name:            attrs.GetName(),
		Path:            attrs.GetPath(),
	}
	checks := []attributesAnswer{first}
	// The connect handlers are the core group's pods/{exec,attach,portforward},
	// reached by GET (the WebSocket handshake) and POST only.
	if first.ResourceRequest && first.APIGroup == "" && first.Resource == "pods" &&
		podConnectSubresourcesRequiringCreate.Has(first.Subresource) && first.Verb == "get" {
		create := first
		create.Verb = "create"
		checks = append(checks, create)
	}
	return checks
}

func anyInvalid(a answer) bool {
	strs := []string{a.Query.Error, a.RejectedDetail}
	for k, vs := range a.Query.Values {
		strs = append(strs, k)
		strs = append(strs, vs...)
	}
	if i := a.RequestInfo; i != nil {
		strs = append(strs, i.Path, i.Verb, i.APIPrefix, i.APIGroup, i.APIVersion, i.Namespace, i.Resource, i.Subresource, i.Name, i.FieldSelector, i.LabelSelector)
		strs = append(strs, i.Parts...)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return true
		}
	}
	return false
}
