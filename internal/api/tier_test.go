package api

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// TestOpenAPITiers: the document's tiers are policy.Tiers.
func TestOpenAPITiers(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Sandbox struct {
					Properties struct {
						Tier struct {
							Enum []string `json:"enum"`
						} `json:"tier"`
					} `json:"properties"`
				} `json:"Sandbox"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Components.Schemas.Sandbox.Properties.Tier.Enum; !slices.Equal(got, policy.Tiers) {
		t.Errorf("the document's tiers %q, want %q", got, policy.Tiers)
	}
}
