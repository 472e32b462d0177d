package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestServingCertificateVerifiesForLoopback(t *testing.T) {
	b, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(b.Files.ServingCert, b.Files.ServingKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM, err := os.ReadFile(b.Files.CACert)
	if err != nil {
		t.Fatal(err)
	}
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA file holds no certificate")
	}
	for _, name := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc", "10.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
		t.Error("serving certificate verifies for example.com")
	}
}

func TestClientKubeconfig(t *testing.T) {
	dir := t.TempDir()
	b, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.NewClient("alice", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "alice.kubeconfig")
	if err := b.WriteKubeconfig(path, "https://127.0.0.1:6443", c); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || len(cfg.CAData) == 0 {
		t.Fatalf("kubeconfig: host %q, CA %d bytes", cfg.Host, len(cfg.CAData))
	}
	blk, _ := pem.Decode(cfg.CertData)
	if blk == nil {
		t.Fatal("no client certificate in the kubeconfig")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "alice" || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:masters" {
		t.Fatalf("client subject %v", cert.Subject)
	}
	if _, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData); err != nil {
		t.Fatalf("client key pair: %v", err)
	}
	for _, f := range []string{b.Files.CAKey, b.Files.ServingKey, b.Files.ServiceAccountKey} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, st.Mode().Perm())
		}
	}
}
