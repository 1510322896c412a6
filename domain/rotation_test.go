package domain

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRotationStages(t *testing.T) {
	for _, tc := range []struct {
		secrets []string
		want    []string
	}{
		{[]string{SecretKubernetesCA}, []string{RotationAccept, RotationSwap, RotationDrop}},
		{[]string{SecretTalosCA, SecretBootstrapToken}, []string{RotationAccept, RotationSwap, RotationDrop}},
		{[]string{SecretAggregatorCA}, []string{RotationSwap}},
		{[]string{SecretBootstrapToken, SecretAggregatorCA}, []string{RotationSwap}},
	} {
		stages := RotationStages(tc.secrets)
		assert.Equal(t, tc.want, stages, "%v", tc.secrets)
		last := stages[len(stages)-1]
		assert.Equal(t, "", NextRotationStage(stages, last))
	}
	assert.Equal(t, RotationSwap, NextRotationStage([]string{RotationAccept, RotationSwap, RotationDrop}, RotationAccept))
	assert.Equal(t, "", NextRotationStage([]string{RotationSwap}, "bogus"))
}

func TestUpgradeSpecRotate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  UpgradeSpec
		field string // "" = valid
		says  string
	}{
		{name: "all expands", spec: UpgradeSpec{Rotate: []string{"all"}}},
		{name: "one CA", spec: UpgradeSpec{Rotate: []string{SecretKubernetesCA}}},
		{name: "etcd CA refused", spec: UpgradeSpec{Rotate: []string{SecretEtcdCA}}, field: "spec.rotate[0]", says: "talos#8808"},
		{name: "service-account key refused", spec: UpgradeSpec{Rotate: []string{SecretKubernetesCA, SecretServiceAccountKey}}, field: "spec.rotate[1]", says: "one service-account key"},
		{name: "encryption key refused", spec: UpgradeSpec{Rotate: []string{SecretEncryptionKey}}, field: "spec.rotate[0]", says: "secretbox"},
		{name: "unknown", spec: UpgradeSpec{Rotate: []string{"dns"}}, field: "spec.rotate[0]", says: "unknown secret"},
		{name: "with a version", spec: UpgradeSpec{Rotate: []string{SecretTalosCA}, TalosVersion: "v1.13.0"}, field: "spec.rotate", says: "not both"},
		{name: "narrowed", spec: UpgradeSpec{Rotate: []string{SecretTalosCA}, NodeGroups: []string{"w"}}, field: "spec.nodeGroups", says: "every machine"},
		{name: "nothing", spec: UpgradeSpec{}, field: "spec.talosVersion", says: "rotate"},
		{name: "all does not hide a refused one", spec: UpgradeSpec{Rotate: []string{"all", SecretEtcdCA}}, field: "spec.rotate[4]", says: "talos#8808"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec
			s.Default()
			causes := s.Validate("spec")
			if tc.field == "" {
				assert.Empty(t, causes)
				assert.True(t, s.Rotation())
				return
			}
			var hit bool
			for _, c := range causes {
				if c.Field == tc.field && strings.Contains(c.Message, tc.says) {
					hit = true
				}
			}
			assert.True(t, hit, "want %s saying %q, got %+v", tc.field, tc.says, causes)
		})
	}
	all := UpgradeSpec{Rotate: []string{SecretBootstrapToken, "all"}}
	all.Default()
	assert.Equal(t, RotatableSecrets, all.Rotate)
	assert.Equal(t, "rotated talos-ca, kubernetes-ca, aggregator-ca, bootstrap-token", all.Target())
}
