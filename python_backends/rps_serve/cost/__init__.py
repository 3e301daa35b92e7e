"""Cost model: the Impact Estimator, the Request Classifier, and their ONNX form."""
