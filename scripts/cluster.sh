#!/usr/bin/env bash
# Start or stop a Spark standalone cluster on this machine: a master and N workers of one core
# each (default 2), each its own JVM, from the installed pyspark (which has no sbin/ scripts).
#   scripts/cluster.sh start [--workers N]   -> prints the master URL (spark://127.0.0.1:7077)
#   scripts/cluster.sh stop
# The autoscaler (docs/autoscaling.md) changes how many executors an application has on them.
set -euo pipefail
cd "$(dirname "$0")/.."
SPARK_HOME="$(.venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/.venv/bin/python"
WORKERS=2
PORT="${DRIFTJOIN_CLUSTER_PORT:-7077}"   # another port lets two clusters share a machine
UI=$((PORT + 11003))
RUN=.cluster${DRIFTJOIN_CLUSTER_PORT:+-$PORT}
if [ "${2:-}" = "--workers" ]; then WORKERS="${3:?--workers needs a number}"; fi
case "${1:-}" in
  start)
    if (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null; then
      echo "port $PORT is taken (another cluster?): stop it or set DRIFTJOIN_CLUSTER_PORT" >&2; exit 1
    fi
    mkdir -p "$RUN"
    nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$PORT" --webui-port "$UI" > "$RUN/master.log" 2>&1 &
    echo $! > "$RUN/master.pid"
    for _ in $(seq 60); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 1; done
    if ! kill -0 "$(cat "$RUN/master.pid")" 2>/dev/null; then echo "the master did not start: see $RUN/master.log" >&2; exit 1; fi
    for i in $(seq "$WORKERS"); do
      nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker "spark://127.0.0.1:$PORT" \
        --cores 1 --memory 2g --webui-port $((UI + i)) --work-dir "$PWD/$RUN/work$i" > "$RUN/worker$i.log" 2>&1 &
      echo $! > "$RUN/worker$i.pid"
    done
    registered() { grep -c 'Successfully registered with master' "$RUN"/worker*.log 2>/dev/null | awk -F: '{s+=$2} END {print s+0}'; }
    for _ in $(seq 60); do [ "$(registered)" -ge "$WORKERS" ] && break; sleep 1; done
    if [ "$(registered)" -lt "$WORKERS" ]; then echo "$(registered) of $WORKERS workers registered in 60 s: see $RUN/worker*.log" >&2; exit 1; fi
    echo "spark://127.0.0.1:$PORT"
    ;;
  stop)
    for f in "$RUN"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; rm -f "$f"; done
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
