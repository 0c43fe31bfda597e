package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions (key 18), v0-v3: the served table, built from the registry. A request above
// v3 gets a v0 response carrying UNSUPPORTED_VERSION and the table (dispatch).
var apiVersionsAPI = api{
	key: keyApiVersions, min: 0, max: 3,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		p.reply(apiVersionsResponse(req.GetVersion(), 0), nil)
	},
	fail: func(req kmsg.Request, code int16, _ string) kmsg.Response {
		return apiVersionsResponse(req.GetVersion(), code)
	},
}

func apiVersionsResponse(version, code int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	resp.ErrorCode = code
	for _, key := range servedKeys() {
		a := served[key]
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, a.min, a.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}
