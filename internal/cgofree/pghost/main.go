// Command pghost is a PostgreSQL-only host built with CGO_ENABLED=0 by
// .ci/run: gormstore on the host's own *gorm.DB, both handlers, the
// middleware and pgcluster.
package main

import (
	"context"
	"log"
	"net/http"
	"os"

	gormpostgres "gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store/gormstore"
	"github.com/embedkit/embedkit/store/gormstore/postgres"
)

func main() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL")
	db, err := gorm.Open(gormpostgres.Open(dsn), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	st, err := gormstore.OpenDB(db)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if _, err := postgres.Open(dsn); err != nil { // the DSN convenience too
		log.Fatal(err)
	}
	cluster, err := pgcluster.New(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	mux := http.NewServeMux()
	for _, rt := range embedsession.NewHandler(st).Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	for _, rt := range chatstream.NewHandler(st, nil, chatstream.WithCluster(cluster)).Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	mux.Handle("GET /embed/", middleware.Session(st)(http.NotFoundHandler()))
	log.Fatal(http.ListenAndServe("127.0.0.1:0", mux))
}
