document.getElementById("external").textContent = "external script ran";
