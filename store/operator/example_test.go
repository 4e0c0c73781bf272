package operator_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/memstore"
	"github.com/embedkit/embedkit/store/operator"
)

// Set up a tenant from Go: the account, a key, a deployment, an agent and
// the account-wide definitions; then list and revoke the key.
func Example() {
	ctx := context.Background()
	st := memstore.New() // or sqlite.Open(path), postgres.Open(dsn), gormstore.OpenDB(db)
	op := operator.New(st)

	if _, err := op.SaveAccount(ctx, operator.Account{
		Name:           "acme",
		Plan:           store.PlanEnterprise, // chat needs premium or enterprise
		UseCreatorMode: true,
		Deployments:    []operator.Deployment{{ID: 1, Name: "production"}},
		Agents:         []operator.Agent{{ID: "7", DeploymentID: 1}},
		UserAttributes: []operator.Attribute{{Name: "country", Type: store.TypeString}},
		Groups:         []operator.Group{{Name: "sales"}},
	}); err != nil {
		log.Fatal(err)
	}

	// The secret is returned once: hand it to the backend that calls the API.
	key, info, err := op.CreateAPIKey(ctx, "acme", operator.APIKey{Admin: true, Name: "backend"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("key handed out:", strings.HasPrefix(key, "sk-"))

	keys, err := op.APIKeys(ctx, "acme") // hashes only, never secrets
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range keys {
		fmt.Println(k.Name, k.Admin, k.Origin, k.Hash == operator.HashKey(key))
	}

	if err := op.RevokeAPIKey(ctx, "acme", info.Hash); err != nil {
		log.Fatal(err)
	}
	keys, _ = op.APIKeys(ctx, "acme")
	fmt.Println("keys after revoke:", len(keys))
	// Output:
	// key handed out: true
	// backend true api true
	// keys after revoke: 0
}

// Apply the bootstrap JSON at every start. The file may name keys by their
// SHA-256 (keyHash) so that it holds no secret; a key it no longer lists is
// removed at the next start.
func ExampleOperator_Apply() {
	const config = `{
	  "accounts": [{
	    "name": "acme",
	    "plan": "premium",
	    "apiKeys": [{"keyHash": "6e7f0aa0ab3ee28e61ab59b22e1a0e9e98f8b2a9c1f8b1a9b3b5d3c2f6a4e1d0", "admin": true}],
	    "deployments": [{"id": 1, "name": "production"}],
	    "agents": [{"id": "7", "deploymentId": 1}]
	  }]
	}`
	cfg, err := operator.DecodeConfig(strings.NewReader(config)) // or operator.LoadConfig(path)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	op := operator.New(memstore.New())
	if err := op.Apply(ctx, cfg); err != nil {
		log.Fatal(err)
	}
	keys, _ := op.APIKeys(ctx, "acme")
	fmt.Println(len(keys), keys[0].Origin, keys[0].Admin)
	// Output: 1 config true
}
