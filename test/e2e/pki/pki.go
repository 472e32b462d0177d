// Package pki makes the certificates and keys of a throwaway control plane
// with crypto/x509: a cluster CA, the API server's serving certificate for
// the loopback address, the service-account signing key, and client
// certificates signed by the CA; and writes kubeconfig files for clients.
// Keys are ECDSA P-256: fast to generate, accepted by every component.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// validity of every certificate: longer than any test, short enough that
// a leaked file is useless soon.
const validity = 24 * time.Hour

// Files are the paths of the PEM files a Bundle wrote.
type Files struct {
	CACert, CAKey           string
	ServingCert, ServingKey string
	// ServiceAccountKey signs service-account tokens (kube-apiserver
	// --service-account-signing-key-file, kube-controller-manager
	// --service-account-private-key-file); ServiceAccountPub verifies them.
	ServiceAccountKey, ServiceAccountPub string
}

// Bundle is a CA and the certificates of one control plane.
type Bundle struct {
	Files Files

	caCert *x509.Certificate
	caKey  crypto.Signer
	dir    string
}

// ServingNames are the names the API server's certificate is valid for.
var ServingNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}

// ServingIPs are the addresses the API server's certificate is valid for:
// loopback, and the first address of the service range (the kubernetes
// Service) that controlplane configures.
var ServingIPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 1)}

// New makes a CA, the API server's serving certificate and the service
// account key, and writes them under dir.
func New(dir string) (*Bundle, error) {
	b := &Bundle{dir: dir}
	caKey, err := newKey()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "tessera-e2e-ca"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if b.caCert, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	b.caKey = caKey
	if b.Files.CACert, b.Files.CAKey, err = b.write("ca", der, caKey); err != nil {
		return nil, err
	}

	servingDER, servingKey, err := b.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    ServingNames,
		IPAddresses: ServingIPs,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if b.Files.ServingCert, b.Files.ServingKey, err = b.write("apiserver", servingDER, servingKey); err != nil {
		return nil, err
	}

	saKey, err := newKey()
	if err != nil {
		return nil, err
	}
	if b.Files.ServiceAccountKey, err = writeKey(filepath.Join(dir, "service-account.key"), saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, fmt.Errorf("service account public key: %w", err)
	}
	b.Files.ServiceAccountPub = filepath.Join(dir, "service-account.pub")
	if err := writePEM(b.Files.ServiceAccountPub, "PUBLIC KEY", pub); err != nil {
		return nil, err
	}
	return b, nil
}

// Client is a client identity: a certificate signed by the cluster CA.
type Client struct {
	CertPEM, KeyPEM []byte
}

// NewClient signs a client certificate for user in groups. The API server
// maps CommonName to the user name and Organization to groups
// (system:masters is cluster-admin).
func (b *Bundle) NewClient(user string, groups ...string) (*Client, error) {
	der, key, err := b.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("client certificate for %s: %w", user, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("client key for %s: %w", user, err)
	}
	return &Client{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// WriteKubeconfig writes a kubeconfig at path for client talking to server
// (https://127.0.0.1:port), trusting the cluster CA.
func (b *Bundle) WriteKubeconfig(path, server string, c *Client) error {
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.caCert.Raw})
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.CertPEM, ClientKeyData: c.KeyPEM}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	cfg.CurrentContext = "e2e"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return nil
}

// sign issues a certificate from tmpl with a fresh key, signed by the CA.
func (b *Bundle) sign(tmpl *x509.Certificate) ([]byte, crypto.Signer, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = time.Now().Add(-time.Minute)
	tmpl.NotAfter = time.Now().Add(validity)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, b.caCert, key.Public(), b.caKey)
	if err != nil {
		return nil, nil, err
	}
	return der, key, nil
}

// write stores a certificate and its key as <name>.crt and <name>.key.
func (b *Bundle) write(name string, der []byte, key crypto.Signer) (certPath, keyPath string, err error) {
	certPath = filepath.Join(b.dir, name+".crt")
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	keyPath, err = writeKey(filepath.Join(b.dir, name+".key"), key)
	return certPath, keyPath, err
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return k, nil
}

func writeKey(path string, key crypto.Signer) (string, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return path, writePEM(path, "PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// serial is a random 128-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // crypto/rand does not fail on Linux
	}
	return n
}
