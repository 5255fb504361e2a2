# Sourced by bench/peers.sh and bench/callgrind.sh: the TLS origin's
# certificate for "localhost", from a throwaway CA the proxies under test
# are told to trust.
#   origin_cert DIR CA_NAME  writes DIR/origin-ca.pem (+ .key) and
#                            DIR/origin.pem (+ .key), valid two days
origin_cert() {
  local dir=$1 name=$2
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=$name" -keyout "$dir/origin-ca.key" -out "$dir/origin-ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout "$dir/origin.key" -out "$dir/origin.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost\n' >"$dir/origin.ext"
  openssl x509 -req -in "$dir/origin.csr" -CA "$dir/origin-ca.pem" -CAkey "$dir/origin-ca.key" \
    -CAcreateserial -days 2 -extfile "$dir/origin.ext" -out "$dir/origin.pem" 2>/dev/null
}
