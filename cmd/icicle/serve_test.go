package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/icicle-search/sidecar/config"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key as PEM files in dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "icicle-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestServeTLS: with server.tls_cert_file and tls_key_file the listener serves https with the configured
// certificate (a client trusting it gets the answer; plain http gets none), and the configuration
// validates; without them it serves plain http.
func TestServeTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	cfg := config.Default()
	cfg.Server.TLSCertFile, cfg.Server.TLSKeyFile = certFile, keyFile
	require.NoError(t, cfg.Validate(), "a loadable pair validates")

	start := func(c config.Server) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		hs := newHTTPServer(c, ln.Addr().String(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "ok")
		}))
		done := make(chan error, 1)
		go func() { done <- serveOn(ln, hs, c) }()
		t.Cleanup(func() {
			require.NoError(t, hs.Close())
			require.ErrorIs(t, <-done, http.ErrServerClosed)
		})
		return ln.Addr().String()
	}

	addr := start(cfg.Server)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	res, err := client.Get("https://" + addr + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "ok", string(body))
	require.NotNil(t, res.TLS)
	require.GreaterOrEqual(t, res.TLS.Version, uint16(tls.VersionTLS12))

	// A client that does not trust the certificate is refused by its own verification.
	_, err = (&http.Client{Timeout: 5 * time.Second}).Get("https://" + addr + "/healthz")
	var unknown x509.UnknownAuthorityError
	require.True(t, errors.As(err, &unknown), "want an unknown-authority error, got %v", err)
	// Plain http on the TLS port gets no "ok".
	res, err = (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/healthz")
	if err == nil {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusBadRequest, res.StatusCode, "Go answers plain http on a TLS port with 400")
		require.NotEqual(t, "ok", string(body))
	}

	// Without the files: plain http.
	plain := start(config.Default().Server)
	res, err = (&http.Client{Timeout: 5 * time.Second}).Get("http://" + plain + "/healthz")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}

// TestValidateTLSFiles: a key that does not match the certificate, or a file that is not PEM, is named.
func TestValidateTLSFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, _, _ := selfSigned(t, dir)
	_, otherKey, _ := selfSigned(t, t.TempDir())
	garbage := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not pem"), 0o600))
	for _, tt := range []struct {
		name      string
		cert, key string
		want      string
	}{
		{"mismatched key", certFile, otherKey, "server.tls_cert_file"},
		{"not PEM", garbage, garbage, "server.tls_cert_file"},
		{"key missing", certFile, filepath.Join(dir, "nope.pem"), "server.tls_key_file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Server.TLSCertFile, cfg.Server.TLSKeyFile = tt.cert, tt.key
			err := cfg.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestPlanRun(t *testing.T) {
	for _, tc := range []struct {
		sessions, threads, cores int
		want                     [2]int
	}{
		{0, 0, 2, [2]int{1, 2}}, // automatic: one session with every core
		{2, 0, 2, [2]int{2, 1}}, // sessions x threads = cores
		{0, 1, 4, [2]int{4, 1}},
		{3, 0, 2, [2]int{3, 1}}, // more sessions than cores: one thread each
		{2, 2, 2, [2]int{2, 2}}, // configured, as it is
		{0, 0, 0, [2]int{1, 1}},
	} {
		p := planRun(tc.sessions, tc.threads, tc.cores)
		if [2]int{p.sessions, p.threads} != tc.want || p.chosen == "" {
			t.Errorf("planRun(%d, %d, %d) = %+v, want sessions, threads %v", tc.sessions, tc.threads, tc.cores, p, tc.want)
		}
	}
}
