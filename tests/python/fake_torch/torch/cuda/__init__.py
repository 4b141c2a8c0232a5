from torch.cuda import memory  # noqa: F401
