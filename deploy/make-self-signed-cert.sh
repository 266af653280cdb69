#!/bin/sh
# Makes a self-signed certificate and key for a trial of the compose stack's HTTPS proxy:
#   deploy/make-self-signed-cert.sh [directory] [host name]
# Writes <directory>/cert.pem and <directory>/key.pem (default directory deploy/tls, the default
# TLS_CERT_DIR; default host name localhost). Clients must be told to trust it (curl --cacert
# deploy/tls/cert.pem). For production mount a certificate from your CA in TLS_CERT_DIR instead.
set -eu
dir=${1:-$(dirname "$0")/tls}
host=${2:-localhost}
mkdir -p "$dir"
umask 077
openssl req -x509 -newkey rsa:2048 -sha256 -nodes -days 30 \
  -subj "/CN=$host" \
  -addext "subjectAltName=DNS:$host,DNS:localhost,IP:127.0.0.1" \
  -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
# nginx's master process (root) reads both at start-up: the key stays readable by its owner only.
chmod 644 "$dir/cert.pem"
chmod 600 "$dir/key.pem"
echo "wrote $dir/cert.pem and $dir/key.pem for $host (valid 30 days)"
