//go:build tools

// Package tools keeps the Toxiproxy server in this module's dependency graph.
package tools

import _ "github.com/Shopify/toxiproxy/v2/cmd/server"
