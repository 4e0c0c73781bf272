// Command memhost is a memstore host built with CGO_ENABLED=0 by .ci/run.
package main

import (
	"log"
	"net/http"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/store/memstore"
)

func main() {
	st := memstore.New()
	defer st.Close()
	mux := http.NewServeMux()
	for _, rt := range embedsession.NewHandler(st).Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	for _, rt := range chatstream.NewHandler(st, nil).Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:0", mux))
}
