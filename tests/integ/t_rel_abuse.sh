# Reliability campaign 'abuse', short mode (tests/reliability/abuse.sh; the long
# mode: tests/reliability/run --long abuse).
exec bash "$(dirname "$0")/../reliability/abuse.sh"
