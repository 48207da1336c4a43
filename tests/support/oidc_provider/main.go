// A real OpenID Connect provider for Dockyard's tests: zitadel/oidc's OpenID-certified provider library
// (pkg/op) with the in-memory storage and login form of its example server, listening on 127.0.0.1.
//
//	oidc-provider -addr 127.0.0.1:0 -client web:secret:http://127.0.0.1:8080/cb [-client ...] [-issuer URL]
//
// It prints "listening <issuer> <address>" on stdout once it accepts connections. Users: the example's
// (test-user@127.0.0.1 / verysecure, test-user2 / verysecure) or -users FILE (the example's JSON format).
// -issuer sets the issuer it names in discovery and tokens (default http://<address>); tests point it
// elsewhere to see a relying party refuse another issuer.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

type clients []string

func (c *clients) String() string     { return strings.Join(*c, ",") }
func (c *clients) Set(v string) error { *c = append(*c, v); return nil }

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on (127.0.0.1 only in tests)")
	issuer := flag.String("issuer", "", "issuer URL (default http://<the listening address>)")
	users := flag.String("users", "", "a JSON file of users (the zitadel example's format)")
	var cs clients
	flag.Var(&cs, "client", "id:secret:redirectURI[,redirectURI...] of a confidential web client; "+
		"id::redirectURI[,...] of a public (PKCE) client (repeatable)")
	flag.Parse()

	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	iss := *issuer
	if iss == "" {
		iss = "http://" + listener.Addr().String()
	}
	var registered []*storage.Client
	for _, c := range cs {
		parts := strings.SplitN(c, ":", 3)
		if len(parts) != 3 {
			fmt.Fprintln(os.Stderr, "-client wants id:secret:redirectURIs, got", c)
			os.Exit(2)
		}
		uris := strings.Split(parts[2], ",")
		if parts[1] == "" {
			registered = append(registered, storage.NativeClient(parts[0], uris...))
		} else {
			registered = append(registered, storage.WebClient(parts[0], parts[1], uris...))
		}
	}
	storage.RegisterClients(registered...)
	var store storage.UserStore
	if *users != "" {
		store, err = storage.StoreFromFile(*users)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	} else {
		store = storage.NewUserStore(iss)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	router := exampleop.SetupServer(iss, storage.NewStorage(store), logger, false)
	server := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening %s %s\n", iss, listener.Addr().String())
	os.Stdout.Sync()
	if err := server.Serve(listener); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
