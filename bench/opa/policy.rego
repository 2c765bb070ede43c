# The peer's equivalent of portcullis's scenario 3 (kube-api-proxy, PluginToken), local work only:
# HS256 verification of the Bearer token (signature, issuer, audience, expiry), the cluster binding
# (cluster_id in the URL = the token's claim), no impersonation headers, and the header swap (a
# constant ServiceAccount token, as a warm TokenRequest cache would give; the caller's cookie
# removed). The remote gates (OpenFGA, SubjectAccessReview, TokenRequest) are excluded on both sides.
package envoy.authz

import rego.v1

headers := input.attributes.request.http.headers

bearer := substring(headers.authorization, 7, -1) if startswith(headers.authorization, "Bearer ")

verified := io.jwt.decode_verify(bearer, {"secret": data.bench.secret, "iss": "fundament-authn-api", "aud": "fundament-plugin"})

claims := verified[2] if verified[0]

impersonating if {
	some name, _ in headers
	startswith(name, "impersonate-")
}

allow if {
	input.parsed_path[0] == "clusters"
	claims.cluster_id == input.parsed_path[1]
	not impersonating
}

default result := {
	"allowed": false,
	"http_status": 403,
	"headers": {"x-portcullis-reason": "denied"},
	"body": "{\"error\":{\"code\":\"denied\"}}",
}

result := {
	"allowed": true,
	"headers": {"authorization": concat(" ", ["Bearer", data.bench.sa_token])},
	"request_headers_to_remove": ["cookie"],
} if allow
