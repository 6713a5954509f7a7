"""The compact signature read from doc values vs from a stored field: one index holding both, the same
sweep (point in time, ``_source`` off, ``filter_path``) alternated three times in one run.

    ES_URL=http://127.0.0.1:9200 python benchmarks/bench_sig_field.py [--docs 50000]
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy as np  # noqa: E402
from elasticsearch import Elasticsearch, helpers  # noqa: E402

from es_integration.sweep import point_in_time, sweep  # noqa: E402
from scrapy_neardup.core.stored_signature import decode_many, encode_many  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--docs", type=int, default=50_000)
parser.add_argument("--url", default=os.environ.get("ES_URL"), help="the node (default: $ES_URL)")
args = parser.parse_args()
if not args.url:
    parser.error("give the node's URL with --url or ES_URL")
es = Elasticsearch(args.url, request_timeout=300)
index = "bench-sig-field"
es.options(ignore_status=404).indices.delete(index=index)
es.indices.create(index=index, settings={"number_of_shards": 1, "number_of_replicas": 0},
                  mappings={"properties": {"dv": {"type": "binary", "doc_values": True},
                                           "st": {"type": "binary", "store": True}}})
n = args.docs
values = np.random.default_rng(1).integers(0, 1 << 16, size=(n, 128), dtype=np.uint16)
texts = encode_many(values)
docs = ({"_index": index, "_id": f"d{i}", "_source": {"dv": t, "st": t}} for i, t in enumerate(texts))
helpers.bulk(es, docs, chunk_size=2000)
es.indices.refresh(index=index)
es.indices.forcemerge(index=index, max_num_segments=1)
FP = "pit_id,hits.hits._id,hits.hits.fields,hits.hits.sort"
for rnd in range(3):
    for name, opts in (("doc values", {"docvalue_fields": ["dv"]}), ("stored field", {"stored_fields": ["st"]})):
        t0, got, ok = time.perf_counter(), 0, 0
        with point_in_time(es, index) as pit:
            for hits in sweep(es, pit, source=False, page_size=1000, filter_path=FP, **opts):
                got += len(hits)
                key = "dv" if "docvalue_fields" in opts else "st"
                ok += int(decode_many([h["fields"][key][0] for h in hits], 128)[1].sum())
        print(f"round {rnd}: {name}: {got} docs ({ok} decoded) in {time.perf_counter() - t0:.2f}s", flush=True)
es.indices.delete(index=index)
