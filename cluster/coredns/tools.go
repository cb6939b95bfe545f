//go:build tools

// The one-node cluster's DNS (issue 40): CoreDNS from its published module, pinned in go.mod.
package tools

import _ "github.com/coredns/coredns"
