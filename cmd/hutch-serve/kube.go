package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/kube"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// kubeRuntimes are the tiers of a hutch serve --kubernetes: each tier
// whose RuntimeClass the cluster has (the flags' TIER=NAME over
// kube.DefaultRuntimeClasses); the others are unavailable, with the
// reason. Its state is the cluster's too (kube.Store).
func kubeRuntimes(o kube.Options, classes []string) (map[string]sandbox.Runtime, map[string]string, *kube.Cluster, error) {
	o.RuntimeClasses = kube.DefaultRuntimeClasses()
	for _, c := range classes {
		tier, name, ok := strings.Cut(c, "=")
		if !ok || name == "" || !slices.Contains(policy.Tiers, tier) {
			return nil, nil, nil, fmt.Errorf("--kubernetes-runtime-class %q: want TIER=NAME, TIER one of %s", c, strings.Join(policy.Tiers, ", "))
		}
		o.RuntimeClasses[tier] = name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kube.Connect(ctx, o)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--kubernetes: %w", err)
	}
	rts, unavailable := map[string]sandbox.Runtime{}, map[string]string{}
	for _, tier := range slices.Sorted(maps.Keys(o.RuntimeClasses)) {
		if err := cl.CheckRuntimeClass(ctx, o.RuntimeClasses[tier]); err != nil {
			unavailable[tier] = err.Error()
			continue
		}
		rt, err := cl.Runtime(tier)
		if err != nil {
			return nil, nil, nil, err
		}
		rts[tier] = rt
	}
	if len(rts) == 0 {
		return nil, nil, nil, fmt.Errorf("--kubernetes: the cluster has no RuntimeClass of hutch's: %v", unavailable)
	}
	return rts, unavailable, cl, nil
}

// kubeReplicas is hutch serve's membership among the replicas of its
// --kubernetes-name (daemon.Replicas).
type kubeReplicas struct {
	cl *kube.Cluster
	r  *kube.Replica
}

// joinReplicas makes hutch serve replica name of its cluster's, reached
// at addr.
func joinReplicas(cl *kube.Cluster, name, addr string) (*kubeReplicas, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cl.Join(ctx, name, addr)
	if err != nil {
		return nil, fmt.Errorf("--kubernetes-replica: %w", err)
	}
	return &kubeReplicas{cl: cl, r: r}, nil
}

func (k *kubeReplicas) Self() string { return k.r.Name() }

func (k *kubeReplicas) Prune(ctx context.Context, keep func(string) bool) (int, error) {
	return k.cl.PruneReplicas(ctx, keep)
}

func (k *kubeReplicas) Live(ctx context.Context, fresh bool) (map[string]string, error) {
	return k.cl.Replicas(ctx, fresh)
}

// Close ends the membership: the others take this replica's sandboxes
// over at once.
func (k *kubeReplicas) Close() error {
	err := k.r.Close()
	k.cl.Close()
	return err
}
