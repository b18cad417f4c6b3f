"""lm-eval-harness against an OpenAI-compatible server on the local tasks of tests/clients/lm_eval_tasks/:
`local-completions` (loglikelihood, multiple choice, rolling loglikelihood) with the server's own tokenizer
(`tokenizer_backend=remote`: /tokenizer_info, /tokenize, /detokenize), and `local-chat-completions`
(generate_until through the chat template). Returns each task's metrics and per-item results (loglikelihoods,
generated texts) in one JSON-able dict. Used by lm_eval_test.py, by the llama-server reference recorder and by
scripts/bench-lm-eval.sh (the quantization table)."""
import os
import sys
import tempfile

TASKS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lm_eval_tasks")
COMPLETION_TASKS = ["kestrel_stories_mc", "kestrel_stories_ll", "kestrel_stories_ppl"]
CHAT_TASKS = ["kestrel_stories_gen"]

# Nothing from a hub: the tasks' data is in the repository; the datasets cache lives in a temporary folder.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(tempfile.gettempdir(), f"kestrel-lm-eval-{os.getuid()}"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _items(samples, task):
    """Per document, in document order: the responses lm-eval scored (floats for loglikelihoods, text for
    generations)."""
    out = []
    for s in sorted(samples[task], key=lambda s: s["doc_id"]):
        resps = s["filtered_resps"]
        row = []
        for r in resps:
            if isinstance(r, (list, tuple)):  # (loglikelihood, is_greedy) or a one-item generation list
                r = list(r)
                row.append(r if len(r) != 1 else r[0])
            else:
                row.append(r)
        out.append({"resps": row, "raw": [str(x) for x in s["resps"]] if task in CHAT_TASKS else None})
    return out


def evaluate(base_url, model_name, tasks=None, chat=True, batch_size=8, completions_model="local-completions"):
    """base_url: http://host:port (no /v1). completions_model: the lm-eval model class the loglikelihood tasks
    run through (the reference recorder registers one that scores with llama.cpp's logits)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    here = os.getcwd()
    os.chdir(TASKS_DIR)  # the tasks' data_files are relative to it
    try:
        manager = TaskManager(include_path=TASKS_DIR, include_defaults=False)
        result = {"tasks": {}}
        completion_tasks = [t for t in (tasks or COMPLETION_TASKS) if t in COMPLETION_TASKS]
        if completion_tasks:
            r = lm_eval.simple_evaluate(
                model=completions_model,
                model_args=f"model={model_name},base_url={base_url}/v1/completions,tokenizer_backend=remote,"
                           "num_concurrent=1,max_retries=1,max_length=256,timeout=300",
                tasks=completion_tasks, task_manager=manager, batch_size=batch_size, log_samples=True, bootstrap_iters=0,
                random_seed=0, numpy_random_seed=0, fewshot_random_seed=0)
            for t in completion_tasks:
                result["tasks"][t] = {"metrics": _metrics(r["results"][t]), "items": _items(r["samples"], t)}
        chat_tasks = [t for t in (tasks or CHAT_TASKS) if t in CHAT_TASKS] if chat else []
        if chat_tasks:
            r = lm_eval.simple_evaluate(
                model="local-chat-completions",
                model_args=f"model={model_name},base_url={base_url}/v1/chat/completions,num_concurrent=1,"
                           "max_retries=1,eos_string=</s>,timeout=300",
                tasks=chat_tasks, task_manager=manager, batch_size=1, log_samples=True, apply_chat_template=True,
                bootstrap_iters=0,
                random_seed=0, numpy_random_seed=0, fewshot_random_seed=0)
            for t in chat_tasks:
                result["tasks"][t] = {"metrics": _metrics(r["results"][t]), "items": _items(r["samples"], t)}
        return result
    finally:
        os.chdir(here)


def _metrics(results):
    return {k: v for k, v in results.items() if isinstance(v, (int, float)) and not k.endswith("_stderr,none")
            and "stderr" not in k and k != "alias"}


if __name__ == "__main__":  # lm_eval_run.py BASE_URL MODEL_NAME OUT.json
    import json
    result = evaluate(sys.argv[1], sys.argv[2])
    with open(sys.argv[3], "w") as f:
        json.dump(result, f, indent=1)
