// The seed lease API's routing, for comparison only: Go's net/http ServeMux
// with the seed's patterns behind its bearer-token check, each handler
// answering with the pattern it matched. tests/integration/api-clean-paths
// sends the same raw request targets here and to our lease API. The routes
// the seed served elsewhere (/metrics, /openapi.json) are added so both
// servers know the same paths; /metrics is token-exempt as in ours.
//
// Usage: go run . TOKEN — prints "listening http://127.0.0.1:PORT".
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

func main() {
	token := ""
	if len(os.Args) > 1 {
		token = os.Args[1]
	}
	mux := http.NewServeMux()
	for _, pattern := range []string{
		"GET /healthz",
		"GET /metrics",
		"GET /openapi.json",
		"GET /v1/proxies",
		"POST /v1/leases",
		"DELETE /v1/leases/{id}",
		"POST /v1/leases/{id}/report",
	} {
		p := pattern
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "matched %s id=%q\n", p, r.PathValue("id"))
		})
	}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" || r.URL.Path == "/healthz" || r.URL.Path == "/metrics" {
			mux.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || got != token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening http://%s\n", ln.Addr())
	if err := http.Serve(ln, h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
