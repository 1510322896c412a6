package providers

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestGroupConfigFields(t *testing.T) {
	keys := func(fs []domain.ProviderConfigField) (all, required []string) {
		for _, f := range fs {
			all = append(all, f.Key+":"+f.Kind)
			if f.Required {
				required = append(required, f.Key)
			}
		}
		return all, required
	}
	tests := []struct {
		typ            string
		want, required []string
	}{
		{domain.ProviderOpenStack, []string{"flavor:string", "image:string", "network:string", "subnetID:string", "securityGroups:strings",
			"availabilityZones:strings", "keyPair:string", "configDrive:bool", "installDisk:string", "installImage:string"}, []string{"flavor", "image", "network"}},
		{domain.ProviderOCI, []string{"shape:string", "ocpus:number", "memoryGBs:number", "imageID:string", "subnetID:string",
			"availabilityDomains:strings", "assignPublicIP:bool", "bootVolumeSizeGBs:integer", "nsgIDs:strings", "installDisk:string", "installImage:string"},
			[]string{"shape", "imageID", "subnetID", "availabilityDomains"}},
		{domain.ProviderEmulated, []string{"installDisk:string", "installImage:string"}, nil},
		{domain.ProviderMetal, []string{"selector:string", "installDisk:string", "installImage:string"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			all, required := keys(GroupConfigFields(tt.typ))
			require.Equal(t, tt.want, all)
			if tt.required != nil {
				require.Equal(t, tt.required, required)
			}
		})
	}
	require.Nil(t, GroupConfigFields(domain.ProviderModule))
}
