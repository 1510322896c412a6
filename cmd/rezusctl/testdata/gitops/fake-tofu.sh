#!/bin/sh
# A stand-in for tofu in the CLI tests: in the work dir of tenant "slow" it
# takes the state lock and writes a state through RezusCloud's HTTP backend,
# with the apply's own credentials, as tofu does, then runs until it is
# interrupted (cancel). Everywhere else it fails at once.
case "$1" in version|-version) echo '{"terraform_version":"1.10.0"}'; exit 0;; esac
case "$PWD" in */slow|*/slow/*) ;; *) echo "fake tofu: not the slow tenant" >&2; exit 1;; esac
addr=$(sed -n 's/.*"address": "\([^"]*\)".*/\1/p' backend.tf.json | head -n 1)
curl -fsS -X LOCK -H "Content-Type: application/json" -u "$TF_HTTP_USERNAME:$TF_HTTP_PASSWORD" \
  -d '{"ID":"fake-lock-1","Operation":"OperationTypeApply","Who":"fake-tofu@e2e","Version":"1.10.0","Created":"2026-05-01T11:00:00Z","Path":""}' \
  "$addr/lock" >/dev/null || exit 1
curl -fsS -X POST -H "Content-Type: application/json" -u "$TF_HTTP_USERNAME:$TF_HTTP_PASSWORD" \
  --data-binary '{"version":4,"serial":7,"lineage":"fake-lineage","encryption_version":"v0","encrypted_data":"e30="}' \
  "$addr?ID=fake-lock-1" >/dev/null || exit 1
echo "fake tofu: holding the state lock"
exec sleep 300
