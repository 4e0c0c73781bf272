// Command stdlib mounts the embedkit handlers on a plain http.ServeMux, to
// show that they need no particular router: path parameters are read with
// r.PathValue, which ServeMux fills itself. It serves the demo account
// (operator.DemoConfig: admin API key sk-acme-admin) with the demo agent.
//
//	go run ./examples/stdlib -addr 127.0.0.1:8081 -db stdlib.db
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/embedsession"
	"github.com/embedkit/embedkit/examples/demoagent"
	"github.com/embedkit/embedkit/store/operator"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen address")
	db := flag.String("db", "stdlib.db", "SQLite path, :memory:, or postgres:// DSN")
	flag.Parse()
	if err := run(*addr, *db); err != nil {
		fmt.Fprintln(os.Stderr, "stdlib:", err)
		os.Exit(1)
	}
}

func run(addr, db string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	// The address first: a start that fails changes no database.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()

	st, err := openStore(db)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := operator.New(st).Apply(ctx, operator.DemoConfig()); err != nil {
		return err
	}
	agent, err := demoagent.New()
	if err != nil {
		return err
	}
	defer agent.Close()

	embed := embedsession.NewHandler(st, embedsession.WithLogger(log))
	chat := chatstream.NewHandler(st, agent, chatstream.WithLogger(log))
	// Deletes expired ephemeral users, session ids and tokens.
	reaper := chatstream.NewReaper(st, 0, chatstream.WithLogger(log))
	reaper.Start()
	defer reaper.Close()

	mux := http.NewServeMux()
	for _, rt := range embed.Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}
	for _, rt := range chat.Routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, rt.Handler)
	}

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = chat.Shutdown(sctx)
		_ = srv.Shutdown(sctx)
	}()
	fmt.Printf("listening on http://%s (ServeMux), demo admin API key sk-acme-admin\n", ln.Addr())
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
