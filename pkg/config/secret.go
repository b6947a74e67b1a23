package config

import (
	"slices"
	"strings"
)

var secretSuffixes = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "API_KEY", "APIKEY",
	"PRIVATE_KEY", "ACCESS_KEY", "SECRET_KEY", "CREDENTIALS", "AUTH"}

// Cloud and tool credentials whose names do not end in one of the suffixes.
var secretNames = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"GOOGLE_APPLICATION_CREDENTIALS", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PASSWORD",
	"DOCKER_AUTH_CONFIG", "NPM_CONFIG__AUTH", "PGPASSWORD", "MYSQL_PWD", "VAULT_TOKEN",
	"HEROKU_API_KEY", "DIGITALOCEAN_ACCESS_TOKEN"}

// IsSecretName reports whether an environment variable's name looks like it holds a secret
// (*TOKEN, *SECRET, *PASSWORD, *API_KEY, *PRIVATE_KEY, cloud credentials). Such values are
// refused in env and never printed.
func IsSecretName(name string) bool {
	n := strings.ToUpper(name)
	if slices.Contains(secretNames, n) {
		return true
	}
	for _, s := range secretSuffixes {
		if n == s || strings.HasSuffix(n, "_"+s) || strings.HasSuffix(n, s) && s != "AUTH" {
			return true
		}
	}
	return false
}

// Masked is what explain prints instead of a secret value.
const Masked = "***"

// MaskEnv returns value, or Masked when name looks like a secret.
func MaskEnv(name, value string) string {
	if IsSecretName(name) {
		return Masked
	}
	return value
}
