#!/usr/bin/env bash
# Start or stop a Spark Connect server on this machine, from the installed pyspark, set up for
# driftjoin (README, "Spark Connect"): local[N] (default 2 cores), the RocksDB state store, and
# Python workers that run this venv's Python with this checkout on their path.
#   scripts/connect-server.sh start [--port N]   -> prints the URL (sc://127.0.0.1:15002) once it answers
#   scripts/connect-server.sh stop [--port N]
# DRIFTJOIN_CONNECT_RUN: the folder of its pid and log files (default .connect-<port>);
# DRIFTJOIN_CONNECT_CORES: the cores of local[N]; DRIFTJOIN_PYTHON: the Python (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${DRIFTJOIN_PYTHON:-$PWD/.venv/bin/python}"
SPARK_HOME="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
PORT=15002
if [ "${2:-}" = "--port" ]; then PORT="${3:?--port needs a number}"; fi
RUN="${DRIFTJOIN_CONNECT_RUN:-$PWD/.connect-$PORT}"
mkdir -p "$RUN"
export SPARK_HOME SPARK_LOCAL_IP=127.0.0.1 SPARK_PID_DIR="$RUN" SPARK_LOG_DIR="$RUN" SPARK_IDENT_STRING="driftjoin-$PORT"
export PYSPARK_PYTHON="$PY" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PATH="$(dirname "$PY"):$PATH"
case "${1:-}" in
  start)
    if (echo > /dev/tcp/127.0.0.1/"$PORT") 2>/dev/null; then
      echo "port $PORT is taken (another server?): stop it or pass --port" >&2; exit 1
    fi
    "$SPARK_HOME/sbin/start-connect-server.sh" --master "local[${DRIFTJOIN_CONNECT_CORES:-2}]" --driver-memory 2g \
      --conf spark.connect.grpc.binding.address=127.0.0.1 \
      --conf spark.connect.grpc.binding.port="$PORT" \
      --conf spark.sql.streaming.stateStore.providerClass=org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider \
      --conf spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true \
      --conf spark.pyspark.python="$PY" \
      --conf spark.python.daemon.module=driftjoin.spark.runtime.worker_daemon \
      --conf spark.python.authenticate.socketTimeout=120s \
      --conf spark.sql.shuffle.partitions=2 --conf spark.default.parallelism=2 \
      --conf spark.sql.adaptive.enabled=false \
      --conf spark.sql.execution.arrow.pyspark.enabled=true \
      --conf spark.sql.session.timeZone=UTC \
      --conf spark.ui.enabled=false \
      --conf "spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1" > "$RUN/start.log" 2>&1
    pid="$(cat "$RUN"/*.pid 2>/dev/null || true)"
    for _ in $(seq 120); do
      (echo > /dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break
      if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then break; fi
      sleep 1
    done
    if ! (echo > /dev/tcp/127.0.0.1/"$PORT") 2>/dev/null; then
      echo "the Spark Connect server did not answer on port $PORT: see $RUN" >&2
      tail -n 20 "$RUN"/*.out >&2 2>/dev/null || cat "$RUN/start.log" >&2
      exit 1
    fi
    echo "sc://127.0.0.1:$PORT"
    ;;
  stop)
    "$SPARK_HOME/sbin/stop-connect-server.sh" > /dev/null
    ;;
  *) echo "usage: $0 start|stop [--port N]" >&2; exit 2 ;;
esac
