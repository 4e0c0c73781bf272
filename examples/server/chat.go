package main

import (
	"context"
	"log/slog"

	"github.com/gorilla/mux"

	"github.com/embedkit/embedkit/chatstream/chatpage"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/operator"
)

// mountChatPage mounts the embed chat page at /embed/chat and the demo
// host page at / (which mints sessions only when demo: the server runs the
// built-in demo config).
func mountChatPage(r *mux.Router, st store.Store, cfg operator.Config, demo bool, vegaDir string, log *slog.Logger) error {
	opts := []chatpage.Option{
		chatpage.WithTitle("Ask your data"),
		chatpage.WithLogger(log),
		// The demo host page is on the same origin; pages of other local
		// origins may frame the chat too, to try it from another app.
		chatpage.WithFrameAncestors("'self'", "http://localhost:*", "http://127.0.0.1:*"),
	}
	if vegaDir != "" {
		vega, err := chatpage.LoadVega(vegaDir)
		if err != nil {
			return err
		}
		opts = append(opts, chatpage.WithVega(vega))
	}
	page := chatpage.New(st, configAgent(st, cfg), opts...)
	for _, rt := range page.Routes() {
		r.Handle(rt.Pattern, rt.Handler).Methods(methods(rt.Method)...)
	}
	return mountDemoHost(r, demo)
}

// configAgent chooses, for a session, the first agent of its account in
// the bootstrap config that belongs to the session's deployment, else the
// account's first agent.
func configAgent(st store.Store, cfg operator.Config) chatpage.AgentFunc {
	return func(ctx context.Context, es middleware.EmbedSession) (string, error) {
		acct, err := st.AccountByID(ctx, es.Session.AccountID)
		if err != nil {
			return "", err
		}
		for _, a := range cfg.Accounts {
			if a.Name != acct.Name || len(a.Agents) == 0 {
				continue
			}
			for _, ag := range a.Agents {
				if ag.DeploymentID == es.Session.DeploymentID {
					return ag.ID, nil
				}
			}
			return a.Agents[0].ID, nil
		}
		return "", nil
	}
}
