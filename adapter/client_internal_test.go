package adapter

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAddrFromCloudID(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		id, want, wantErr string
	}{
		{id: "prod:" + enc("eu-west-1.aws.found.io$abc$def"), want: "https://abc.eu-west-1.aws.found.io"},
		{id: "prod:" + enc("eu-west-1.aws.found.io$abc"), want: "https://abc.eu-west-1.aws.found.io"},
		{id: "prod:" + enc("eu-west-1.aws.found.io"), wantErr: "host$es-id"},
		{id: "prod:" + enc("$abc$def"), wantErr: "host$es-id"},
		{id: "prod", wantErr: "want name:base64"},
		{id: "prod:a:b", wantErr: "want name:base64"},
		{id: "prod:%%%", wantErr: "illegal base64"},
	}
	for _, tt := range tests {
		got, err := addrFromCloudID(tt.id)
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, tt.id)
			continue
		}
		require.NoError(t, err, tt.id)
		require.Equal(t, tt.want, got)
	}
}

func TestNewESClientAddresses(t *testing.T) {
	_, err := newESClient(esConfig{addresses: []string{"localhost:9200"}})
	require.ErrorContains(t, err, `address "localhost:9200": want http://host:port`)
	_, err = newESClient(esConfig{addresses: []string{"http://a:9200"}, cloudID: "x:eQ=="})
	require.ErrorContains(t, err, "both Addresses and CloudID")
	c, err := newESClient(esConfig{addresses: []string{"http://a:9200/", "https://b:9200"}})
	require.NoError(t, err)
	require.Len(t, c.tp.URLs(), 2)
	require.Equal(t, "http://a:9200", c.tp.URLs()[0].String())
}
