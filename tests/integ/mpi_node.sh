#!/bin/bash
# mpi_node.sh - run one ckptd of an MPI test cluster (tests/integ/t_mpi_*.sh).
# mpirun starts this once per node; it records the daemon's pid and applies
# per-node fault injection, then execs ckptd:
#   CKPT_NODE_FAULT="N=SPEC"      CKPT_FAULT=SPEC only on node N
#   CKPT_NODE_FAILPOINT="N=NAME"  CKPT_FAILPOINT=NAME only on node N (with
#                                 CKPT_FAILPOINT_HOLD set, it holds there)
#   CKPT_NODE_CONF="N=FILE"       node N reads config FILE instead
#   CKPT_NODE_DIR=DIR             write DIR/node.N.pid
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
unset CKPT_FAULT CKPT_FAILPOINT
[ "${CKPT_NODE_FAULT%%=*}" = "$r" ] && export CKPT_FAULT=${CKPT_NODE_FAULT#*=}
[ "${CKPT_NODE_FAILPOINT%%=*}" = "$r" ] && export CKPT_FAILPOINT=${CKPT_NODE_FAILPOINT#*=}
[ -n "${CKPT_NODE_DIR:-}" ] && echo $$ > "$CKPT_NODE_DIR/node.$r.pid"
[ "${CKPT_NODE_CONF%%=*}" = "$r" ] && set -- "$1" -c "${CKPT_NODE_CONF#*=}"
exec "$@"
