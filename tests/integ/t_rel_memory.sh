# Reliability campaign 'memory', short mode (tests/reliability/memory.sh; the long
# mode: tests/reliability/run --long memory).
exec bash "$(dirname "$0")/../reliability/memory.sh"
