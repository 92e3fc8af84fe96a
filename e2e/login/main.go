// Command mock-idp is the identity provider of the login test: an OpenID
// Connect provider on loopback (TLS with a certificate it makes at start,
// as a provider's issuer URL must be https for the Auth component) that
// logs in, without asking, the people given on the command line, one per
// authorization request, in order.
//
// It prints one line, `issuer=<url>`, once it serves, and runs until its
// standard input closes (so it never outlives the test that started it).
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strings"
	"time"

	"github.com/oauth2-proxy/mockoidc"
)

// users collects `-user email[:group,group]` flags.
type users []*mockoidc.MockUser

func (u *users) String() string { return fmt.Sprint(len(*u)) }

func (u *users) Set(v string) error {
	email, groups, _ := strings.Cut(v, ":")
	user := &mockoidc.MockUser{
		Subject:           email,
		Email:             email,
		EmailVerified:     true,
		PreferredUsername: strings.Split(email, "@")[0],
	}
	if groups != "" {
		user.Groups = strings.Split(groups, ",")
	}
	*u = append(*u, user)
	return nil
}

// selfSigned makes a certificate for 127.0.0.1, valid for an hour.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "mock-idp"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func main() {
	var people users
	clientID := flag.String("client-id", "", "the client ID the provider accepts")
	secretFile := flag.String("client-secret-file", "", "a file holding the client secret it accepts")
	flag.Var(&people, "user", "a person to log in (email[:group,group]); repeat, in order")
	flag.Parse()
	if *clientID == "" || *secretFile == "" {
		fmt.Fprintln(os.Stderr, "mock-idp: -client-id and -client-secret-file are required")
		os.Exit(2)
	}
	secret, err := os.ReadFile(*secretFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mock-idp:", err)
		os.Exit(1)
	}
	m, err := mockoidc.NewServer(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mock-idp:", err)
		os.Exit(1)
	}
	m.ClientID = *clientID
	m.ClientSecret = strings.TrimSpace(string(secret))
	// oauth2-proxy's configuration asks for PKCE with S256.
	m.CodeChallengeMethodsSupported = []string{"S256", "plain"}
	for _, u := range people {
		m.QueueUser(u)
	}
	cert, err := selfSigned()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mock-idp:", err)
		os.Exit(1)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mock-idp:", err)
		os.Exit(1)
	}
	// mockoidc serves on the listener it is given: TLS is the listener's.
	if err := m.Start(tls.NewListener(ln, cfg), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "mock-idp:", err)
		os.Exit(1)
	}
	fmt.Printf("issuer=%s\n", m.Issuer())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = m.Shutdown()
}
