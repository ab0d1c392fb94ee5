//go:build tools

// Package tools pins the Karmada release that benchmarks/peers/karmada/build.sh builds
// (karmada-controller-manager, karmada-scheduler, karmada-webhook) for the side-by-side benchmark.
package tools

import (
	_ "github.com/karmada-io/karmada/cmd/controller-manager"
	_ "github.com/karmada-io/karmada/cmd/scheduler"
	_ "github.com/karmada-io/karmada/cmd/webhook"
)
